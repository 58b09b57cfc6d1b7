"""Small suites the e2e tests run: written out as YAML in one place."""

# One GSM8K workload of 4 problems: the smallest run that judges every check family
TINY = """name: tiny
workloads:
  - id: g
    workload: gsm8k
    params: {limit: 4, max_num_seqs: 4, profile_limit: 2, max_tokens: 96}
"""


def three_gsm8k(c_limit: int = 3, c_max_tokens: int = 16) -> str:
    """Three GSM8K workloads on the bundled CPU runner: a and c share an engine shape (so a
    run goes a, c, b), b has its own. c's size is the caller's: a test that interrupts a
    run makes c long enough to be caught mid-way."""
    return f"""name: three
workloads:
  - id: a
    workload: gsm8k
    params: {{limit: 2, max_num_seqs: 2, max_tokens: 16, profile_limit: 1}}
  - id: b
    workload: gsm8k
    params: {{limit: 2, max_num_seqs: 3, max_tokens: 16, profile_limit: 1}}
  - id: c
    workload: gsm8k
    params: {{limit: {c_limit}, seed: 1000003, max_num_seqs: 2, max_tokens: {c_max_tokens},
              profile_limit: 1}}
"""


def blocked_gsm8k(name: str, description: str, waves: int, max_tokens: int) -> str:
    """One GSM8K workload in `waves` ABBA waves of 2 problems, medians gated at +20 %: the
    smallest suite whose latency checks are judged per wave (no profiled pass)."""
    return f"""name: {name}
description: {description}
thresholds: {{median_rel: 0.20, latency_rel: 1.0}}
workloads:
  - id: gsm8k
    workload: gsm8k
    params: {{mode: colocated, limit: {2 * waves}, max_num_seqs: 2, wave_size: 2, profile_limit: 0,
             max_tokens: {max_tokens}}}
"""


# GSM8K and a trace replay, each through a PD pair: the vllm target's PD pairs on CPU against
# the bundled runner's (tests/vllm: vLLM's example connector, NIXL, a pair with a process per
# runner). Both entries have one engine shape, so on vLLM one PD pair serves both: a pair's
# start is most of such a run on CPU (about 40 s through NIXL, where each runner has a worker).
PD_CPU = """name: pd-cpu
workloads:
  - id: gsm8k-pd
    workload: gsm8k
    # a 128-token step budget under prompts of 87-256 tokens: the bundled prefill engine
    # chunks them, vLLM's must not (its example connector stores what the first step held)
    params: {mode: pd, limit: 8, max_num_seqs: 2, wave_size: 4, profile_limit: 4,
             max_tokens: 96, max_num_batched_tokens: 128}
  - id: trace-pd
    workload: trace-replay
    # lengths are scaled by 1/32 (trace-replay's length_scale): prompts of 40-160 tokens, so
    # the same 128-token budget chunks the longer ones on the bundled prefill engine too
    params: {trace: "synthetic:n=12,rate=20,input=1280-5120,output=8-24", limit: 12,
             wave_size: 4, max_num_seqs: 2, max_num_batched_tokens: 128, profile_limit: 4}
"""


def pd_cpu_gsm8k_only() -> str:
    """PD_CPU's GSM8K entry alone: a run that judges one PD workload (a fault, a variant of
    the pair) and starts nothing for the trace replay."""
    head, sep, _ = PD_CPU.partition("  - id: trace-pd")
    assert sep, "PD_CPU lost its trace-pd entry"
    return head
