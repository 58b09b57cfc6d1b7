"""GSM8K accuracy workload: lm-eval's prompt and filters, greedy, colocated or PD-disagg.

Default items are generated problems from a held-out seed (the bundled model reads them at
~0.99); `dataset` takes real GSM8K as JSONL (`question`, `answer` per line) or
`hf:openai/gsm8k` when `datasets` is installed and the hub is reachable. Concurrency below
the number of problems forces slot reuse, which is where stale per-slot state shows.
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mrbench.contract import (
    BadInput,
    Batch,
    Driver,
    EngineOptions,
    Outcome,
    Session,
    SideResult,
    WorkloadBase,
    check_rows,
    data_dir,
)

from .engine_shape import batch_engine
from .gsm8k_problems import HELD_OUT_SEEDS, check_split, generate
from .gsm8k_scoring import PROMPT, STOP, score_all


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["colocated", "pd"] = "colocated"
    seed: int = HELD_OUT_SEEDS[0]          # problem-generator seed (never a training seed)
    limit: int = Field(64, ge=1)
    dataset: str | None = None             # JSONL path (a relative one also under the data
                                           # directory: gsm8k/test.jsonl), hf:<repo>, or None
                                           # (generated)
    max_tokens: int = Field(320, ge=1)
    max_num_seqs: int = Field(16, ge=1)
    max_num_batched_tokens: int = Field(2048, ge=16)
    num_speculative_tokens: int = Field(0, ge=0, le=8)
    speculative_method: Literal["ngram", "draft", "eagle"] = "ngram"   # eagle: vLLM only
    wave_size: int | None = Field(None, ge=1)  # prompts per timed wave; None = 2 x max_num_seqs
    profile_limit: int = Field(8, ge=0)    # prompts in the profiled pass (0 = no profiling)
    state_audit: bool = True               # bundled V2: poison freed slots, audit the mirror
    scorer: Literal["mrbench", "lm-eval"] = "mrbench"  # who scores: ours, or lm-eval's own code
    # Chunked-prefill coverage: 3 = this entry is there to run prompts in >= 3 prefill
    # chunks (so middle chunks, which neither start nor finish a prompt); the
    # chunked_prefill_coverage check says "not measured" for a side that ran none
    min_prefill_chunks: Literal[3] | None = None

    @field_validator("scorer")
    @classmethod
    def _scorer_installed(cls, v: str) -> str:
        """lm-eval is an extra (it pulls datasets, evaluate, peft, scikit-learn...): a suite
        that asks for its scorer without it is refused before any engine starts."""
        if v == "lm-eval" and importlib.util.find_spec("lm_eval") is None:
            raise ValueError("the lm-eval scorer needs lm-eval: pip install 'mrbench[lm-eval]'")
        return v


@dataclass
class Item:
    question: str
    answer: str


def _load_jsonl(path: Path, limit: int) -> list[Item]:
    if not path.is_file():
        raise BadInput(f"dataset {path} does not exist")
    items = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise BadInput(f"dataset {path}:{lineno}: not JSON ({e.msg})") from None
            if not isinstance(row, dict) or not isinstance(row.get("question"), str) \
                    or not isinstance(row.get("answer"), str):
                raise BadInput(f"dataset {path}:{lineno}: needs string fields "
                               "'question' and 'answer'")
            items.append(Item(row["question"], row["answer"]))
            if len(items) == limit:
                break
    if not items:
        raise BadInput(f"dataset {path} has no problems")
    check_rows(path, len(items), limit)
    return items


def _load_hub(repo: str, limit: int) -> list[Item]:
    try:
        import datasets  # lazy: optional, only hf: datasets need it
    except ImportError:
        raise BadInput(f"dataset hf:{repo} needs the 'datasets' package (pip install datasets)") \
            from None
    try:
        ds = datasets.load_dataset(repo, "main", split="test")
    except Exception as e:   # offline, unknown repo: one line, not a traceback
        raise BadInput(f"dataset hf:{repo} could not be loaded ({type(e).__name__}: "
                       f"{str(e).splitlines()[0] if str(e) else ''})") from None
    return [Item(r["question"], r["answer"]) for r in ds.select(range(min(limit, len(ds))))]


class GSM8K(WorkloadBase):
    name = "gsm8k"
    description = "GSM8K strict/flexible accuracy (lm-eval gsm8k prompt, 0-shot, greedy)"
    Params = Params

    def engine_options(self, p: Params) -> EngineOptions:
        return batch_engine(p, num_speculative_tokens=p.num_speculative_tokens,
                            speculative_method=p.speculative_method,
                            pd_disagg=p.mode == "pd", state_audit=p.state_audit)

    def prepare(self, p: Params) -> list[Item]:
        if p.dataset is None:
            try:
                check_split(p.seed)
            except ValueError as e:
                raise BadInput(f"gsm8k --seed: {e}") from None
            return [Item(q.question, q.answer) for q in generate(p.seed, p.limit)]
        if p.dataset.startswith("hf:"):
            return _load_hub(p.dataset[3:], p.limit)
        path = Path(p.dataset).expanduser()
        if not path.exists() and not path.is_absolute() and (data_dir() / path).exists():
            path = data_dir() / path           # e.g. gsm8k/test.jsonl in the data directory
        return _load_jsonl(path, p.limit)

    def source(self, p: Params) -> str:
        return p.dataset or f"generated:seed={p.seed}"

    def run(self, sessions: dict[str, Session], items: list[Item], p: Params, driver: Driver
            ) -> Outcome:
        prompts = [PROMPT.format(question=it.question) for it in items]
        # Prompts the model's context cannot hold are scored wrong, on both sides alike.
        any_session = next(iter(sessions.values()))
        run_idx = [i for i, pr in enumerate(prompts) if any_session.fits(pr, p.max_tokens)]
        batch = Batch([prompts[i] for i in run_idx], p.max_tokens, list(STOP),
                      p.wave_size or 2 * p.max_num_seqs, p.profile_limit)
        results, comps, failed = driver.interleaved(sessions, batch)
        for side, res in results.items():
            self._score(res, comps[side], items, run_idx, p.scorer)
            if p.min_prefill_chunks:      # what compare's chunked_prefill_coverage reads
                res.resolved["chunked_prefill"] = dict(min_chunks=p.min_prefill_chunks)
        return results, failed

    @staticmethod
    def _score(res: SideResult, comps: list, items: list[Item], run_idx: list[int],
               scorer: str = "mrbench") -> None:
        by_item = dict(zip(run_idx, comps))
        rows = {r["req_index"]: r for r in res.requests}
        texts = [c.text if (c := by_item.get(i)) else "" for i in range(len(items))]
        scores = score_all(texts, [it.answer for it in items], scorer,
                           [it.question for it in items])
        requests, tokens = [], []
        for i, (it, s) in enumerate(zip(items, scores)):
            c = by_item.get(i)
            base = rows[run_idx.index(i)] if c else dict(prompt_tokens=None, output_tokens=0)
            requests.append({**base, "req_index": i, "fits_context": c is not None,
                             "correct_strict": s.strict, "correct_flexible": s.flexible,
                             "answer_strict": s.strict_answer})
            tokens.append(c.token_ids if c else [])
        for r in res.itl:                    # ITL rows follow the item index too
            r["req_index"] = run_idx[r["req_index"]]
        res.requests, res.tokens = requests, tokens


WORKLOAD = GSM8K()
