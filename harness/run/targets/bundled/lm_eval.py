"""mrbench's bundled runner as an lm-eval model: `mrbench-lm-eval --model mrbench ...`.

`MRBenchLM` wraps `runner_impl.LLM` (the MRv2-style runner, or the V1 reference) in lm-eval's
`LM` interface, registered in lm-eval's model registry as "mrbench" when this module is
imported.

How `--model mrbench` is found, and why there is a `mrbench-lm-eval` command
-----------------------------------------------------------------------------
lm-eval (0.4.13, the newest release) resolves `--model NAME` through
`lm_eval.api.registry.model_registry`, which holds only its built-in `MODEL_MAPPING`
(lm_eval/models/__init__.py) plus whatever the running process registered with
`register_model` / `model_registry.register`. It scans no entry-point group and has no flag
that imports a user module (open upstream: EleutherAI/lm-evaluation-harness#1457 and #3282;
PR #3672 proposes `--include_package`), and `--include_path` only indexes task YAML. So the
plain `lm_eval` executable cannot see a model from another package unless that package is
imported first; the hooks that would force that (a `.pth` file, `sitecustomize`) run code in
every Python process of the environment, which we do not want.

We therefore ship `mrbench-lm-eval` (`[project.scripts]`, also `python -m
mrbench.harness.run.targets.bundled.lm_eval`): it imports this module, which registers
"mrbench", and then runs lm-eval's own CLI entry point (`lm_eval.__main__.cli_evaluate`) on
the unchanged command line. Every lm-eval argument, output file and exit status is
lm-eval's; it is the wrapper lm-eval's maintainers recommend for out-of-tree models until a
plugin mechanism exists (#1621). From Python, `import
mrbench.harness.run.targets.bundled.lm_eval` and then
`lm_eval.simple_evaluate(model="mrbench", ...)`, or pass an `MRBenchLM` instance.

model_args (`--model_args runner=v2 seed=0 ...`)
-------------------------------------------------
- `runner`: "v2" (default) or "v1";  `model` (alias `pretrained`): HF model directory,
  default the bundled trained model (runner_impl/assets/gsm8k-tiny);
- `device`: "cpu" or "cuda"; if absent, lm-eval's `--device` is used, except that its
  default "cuda:0" falls back to "cpu" when torch sees no CUDA device;
- `faults`: fault switches to turn on (v2 only), joined with "+", e.g.
  `faults=stale-slot-state+mirror-increment` (a list in JSON model_args);
- `max_num_seqs` (16) and `max_num_batched_tokens` (2048), as in mrbench's gsm8k workload;
  `seed` (0); `max_gen_toks` (256, lm-eval's usual default; a task's gen_kwargs override it);
- any other `runner_impl.LLM` engine argument (`num_speculative_tokens`,
  `speculative_method`, `pd_disagg`, `dtype`, `max_model_len`, ...), so accuracy can be
  measured under speculative decoding or PD disaggregation too.
lm-eval's `--batch_size` / `--max_batch_size` are ignored: the engine batches continuously
up to `max_num_seqs`.

Requests
--------
- `generate_until`: greedy only (a task asking for `do_sample` or `temperature > 0` gets a
  ValueError); `until` becomes the engine's stop strings (the text is cut before the first
  one, as lm-eval's HF model does) and `max_gen_toks` its `max_tokens`. A prompt that fits
  the context runs unchanged and generation stops at the context's end (as in mrbench's gsm8k
  workload); a longer one keeps its last `max_model_len - max_gen_toks` tokens (lm-eval's HF
  model truncates the same way) and a warning counts them.
- `loglikelihood` / `loglikelihood_rolling`: computed for real, with lm-eval's TemplateLM
  tokenisation and rolling windows, by one full prefill forward of the loaded model per
  sequence (through the model's own paged attention; the runner's scheduler, sampler and
  per-slot state are not involved, so fault switches and speculative decoding do not change
  these scores).
"""
from __future__ import annotations

import logging
import re
from typing import Any

import lm_eval.models  # noqa: F401  (lm-eval fills its built-in registry only while it is empty)
import torch
from lm_eval.__main__ import cli_evaluate
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import model_registry
from lm_eval.models.utils import normalize_gen_kwargs
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window, simple_parse_args_string
from tokenizers import Tokenizer
from tqdm import tqdm

from mrbench.runner_impl import LLM, RunnerError, SamplingParams
from mrbench.runner_impl.model import AttentionMetadata, allocate_kv_cache

eval_logger = logging.getLogger(__name__)

MODEL_NAME = "mrbench"
DEFAULT_MAX_GEN_TOKS = 256
_GREEDY_IGNORED = ("top_p", "top_k")        # meaningless under greedy decoding


def _faults(value: Any) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        parts = re.split(r"[+,;|\s]+", value.strip("[]()"))
        return tuple(g for f in parts if (g := f.strip("'\"")))
    return tuple(value)


def _device(device: Any, lm_eval_device: Any) -> str:
    if device is not None:
        return str(device)
    if lm_eval_device is None:
        return "cpu"
    d = str(lm_eval_device)
    if d.startswith("cuda") and not torch.cuda.is_available():
        return "cpu"                          # lm-eval's --device defaults to cuda:0
    return d


class MRBenchLM(TemplateLM):
    """lm-eval model over `runner_impl.LLM` (see the module docstring for model_args)."""

    def __init__(self, model: str | None = None, runner: str = "v2", device: str | None = None,
                 faults: Any = None, max_num_seqs: int = 16,
                 max_num_batched_tokens: int = 2048, seed: int = 0,
                 max_gen_toks: int = DEFAULT_MAX_GEN_TOKS, pretrained: str | None = None,
                 batch_size: Any = None, max_batch_size: Any = None,
                 lm_eval_device: Any = None, **engine_kwargs: Any) -> None:
        super().__init__()

        if model is not None and pretrained is not None and str(model) != str(pretrained):
            raise ValueError("mrbench model_args: give `model` or `pretrained`, not both")
        model = model if model is not None else pretrained
        if not isinstance(max_gen_toks, int) or max_gen_toks < 1:
            raise ValueError(f"mrbench model_args: max_gen_toks must be an integer >= 1, "
                             f"got {max_gen_toks!r}")
        self.max_gen_toks = max_gen_toks
        self._device = _device(device, lm_eval_device)
        try:
            self.llm = LLM(model=None if model in (None, "") else str(model), runner=str(runner),
                           device=self._device, seed=seed, faults=_faults(faults),
                           max_num_seqs=max_num_seqs,
                           max_num_batched_tokens=max_num_batched_tokens, **engine_kwargs)
        except RunnerError as e:            # ModelLoadError included: one clear line
            raise ValueError(f"mrbench model_args: {e}") from None
        # lm-eval asks for encodings without special tokens (continuations, rolling windows);
        # runner_impl's Tokenizer always adds them, as generation prompts need.
        self._plain_tokenizer = Tokenizer.from_file(str(self.llm.model_dir / "tokenizer.json"))
        self._truncated = 0

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None):
        """lm-eval adds its --batch_size/--max_batch_size/--device; model_args win, and
        its --device is only a fallback (see `_device`)."""
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None}
        kwargs = dict(arg_dict)
        if "device" in extra:
            kwargs["lm_eval_device"] = extra.pop("device")
        for k, v in extra.items():
            kwargs.setdefault(k, v)
        return cls(**kwargs)

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None):
        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    # ---- what lm-eval reads ---------------------------------------------------------
    @property
    def max_length(self) -> int:
        return self.llm.max_model_len

    @property
    def eot_token_id(self) -> int:
        return self.llm.eos_token_ids[0]

    @property
    def prefix_token_id(self) -> int:
        bos = self.llm.tokenizer.bos_token_id
        return bos if bos is not None else self.eot_token_id

    def tok_encode(self, string: str, add_special_tokens: bool | None = None,
                   **kwargs: Any) -> list[int]:
        if add_special_tokens is False:
            return self._plain_tokenizer.encode(string, add_special_tokens=False).ids
        return self.llm.tokenizer.encode(string)

    def get_model_info(self) -> dict:
        cfg = self.llm.config
        return {"mrbench_model": str(self.llm.model_dir), "mrbench_runner": cfg.runner,
                "mrbench_device": cfg.device, "mrbench_faults": sorted(cfg.faults.names),
                "mrbench_max_num_seqs": cfg.max_num_seqs,
                "mrbench_num_speculative_tokens": cfg.num_speculative_tokens,
                "mrbench_pd_disagg": cfg.pd_disagg}

    # ---- generation -----------------------------------------------------------------
    def _sampling(self, gen_kwargs: Any):

        if not isinstance(gen_kwargs, dict):
            raise ValueError(f"mrbench: gen_kwargs must be a dict, got {gen_kwargs!r}")
        temperature = float(gen_kwargs.get("temperature") or 0.0)
        if gen_kwargs.get("do_sample") or temperature > 0:
            raise ValueError(
                "mrbench: only greedy decoding is supported (do_sample=false, temperature=0); "
                f"this request asks for do_sample={gen_kwargs.get('do_sample')!r}, "
                f"temperature={gen_kwargs.get('temperature')!r}")
        kw = dict(normalize_gen_kwargs(gen_kwargs, default_max_gen_toks=self.max_gen_toks))
        until = [u for u in kw.pop("until") if u]
        if not all(isinstance(u, str) for u in until):
            raise ValueError(f"mrbench: `until` must be strings, got {until!r}")
        max_tokens = int(kw.pop("max_gen_toks"))
        for k in ("do_sample", "temperature", *_GREEDY_IGNORED):
            kw.pop(k, None)
        if kw:
            raise ValueError(f"mrbench: unsupported gen_kwargs {sorted(kw)} (supported: until, "
                             "max_gen_toks and its aliases, do_sample, temperature, top_p, top_k)")
        if max_tokens < 1:
            raise ValueError(f"mrbench: max_gen_toks must be >= 1, got {max_tokens}")
        return SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=until), until

    def _prompt(self, context: str, max_tokens: int) -> dict:
        ids = self.llm.tokenizer.encode(context)
        if len(ids) >= self.max_length:
            keep = max(1, self.max_length - max_tokens)
            ids = ids[-keep:]
            self._truncated += 1
            eval_logger.warning("mrbench: %d prompt(s) longer than the model's context "
                                "(%d tokens) were cut to their last %d tokens",
                                self._truncated, self.max_length, keep)
        return {"prompt_token_ids": ids, "prompt": context}

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        if not requests:
            return []
        prompts, params, untils = [], [], []
        for req in requests:
            context, gen_kwargs = req.args
            sp, until = self._sampling(gen_kwargs)
            prompts.append(self._prompt(context, sp.max_tokens))
            params.append(sp)
            untils.append(until)
        ids = [self.llm.add_request(p, sp) for p, sp in zip(prompts, params)]
        done = {}
        with tqdm(total=len(ids), disable=disable_tqdm or self.rank != 0,
                  desc="mrbench generate_until") as bar:
            while self.llm.has_unfinished():
                for out in self.llm.step():
                    done[out.request_id] = out
                    bar.update(1)
        results = []
        for req, rid, until in zip(requests, ids, untils):
            text = done[rid].text
            for term in until:                  # the engine already stopped there; as HFLM
                text = text.split(term)[0]
            self.cache_hook.add_partial("generate_until", req.args, text)
            results.append(text)
        return results

    # ---- log-likelihoods --------------------------------------------------------------
    def _logprobs(self, ids: list[int]) -> torch.Tensor:
        """Log-softmax over the vocabulary at every position of one sequence, [len, V]:
        one prefill row through the model's paged attention, on a private KV cache."""

        model = self.llm.model
        dev = self.llm.config.torch_device
        n, block = len(ids), 16
        num_blocks = -(-n // block)
        kv = allocate_kv_cache(model.config, num_blocks, block, model.embed_tokens.weight.dtype,
                               dev)
        pos = torch.arange(n, device=dev)
        meta = AttentionMetadata(
            query_start_loc=torch.tensor([0, n], dtype=torch.int32, device=dev),
            seq_lens=torch.tensor([n], device=dev), block_table=torch.arange(num_blocks,
                                                                             device=dev)[None],
            slot_mapping=pos, token_row=torch.zeros(n, dtype=torch.long, device=dev),
            token_offset=pos, positions=pos, max_query_len=n, max_seq_len=n,
            uniform_query_len=n, query_lens_cpu=[n])
        with torch.inference_mode():
            hidden = model(torch.tensor(ids, device=dev), meta, kv)
            return torch.log_softmax(model.compute_logits(hidden), dim=-1).cpu()

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False,
                              **kwargs: Any) -> list[tuple[float, bool]]:
        out = []
        for key, context_enc, continuation_enc in tqdm(
                requests, disable=disable_tqdm or self.rank != 0, desc="mrbench loglikelihood"):
            whole = (list(context_enc) + list(continuation_enc))[-(self.max_length + 1):]
            inp = whole[:-1]
            n = min(len(continuation_enc), len(inp))
            if n == 0:
                ll, greedy = 0.0, True
            else:
                logprobs = self._logprobs(inp)[-n:]
                target = torch.tensor(whole[-n:])
                ll = float(logprobs.gather(1, target[:, None]).sum())
                greedy = bool((logprobs.argmax(-1) == target).all())
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, (ll, greedy))
            out.append((ll, greedy))
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:

        out = []
        for (string,) in tqdm([r.args for r in requests],
                              disable=disable_tqdm or self.rank != 0,
                              desc="mrbench loglikelihood_rolling"):
            windows = [make_disjoint_window(w) for w in get_rolling_token_windows(
                token_list=self.tok_encode(string, add_special_tokens=False),
                prefix_token=self.prefix_token_id, max_seq_len=self.max_length,
                context_len=1)]
            scored = self._loglikelihood_tokens([(None, c, t) for c, t in windows],
                                                disable_tqdm=True)
            ll = sum(s[0] for s in scored)
            self.cache_hook.add_partial("loglikelihood_rolling", (string,), ll)
            out.append(ll)
        return out


# Registered as a lazy "module:Class" placeholder that always names this module, so running
# it as `python -m mrbench.harness.run.targets.bundled.lm_eval` (a second copy of the module,
# __main__) registers the same class, and importing it twice never collides in lm-eval's
# registry.
if MODEL_NAME not in model_registry:
    model_registry.register(
        MODEL_NAME, target="mrbench.harness.run.targets.bundled.lm_eval:MRBenchLM")


def main() -> None:
    """`mrbench-lm-eval`: lm-eval's CLI, unchanged, with the "mrbench" model registered."""
    cli_evaluate()


if __name__ == "__main__":
    main()
