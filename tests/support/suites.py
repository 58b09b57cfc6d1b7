"""Small suites the e2e tests run: written out as YAML in one place."""


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
