"""mrbench's GSM8K through lm-eval: the shipped task, its local data, and lm-eval's scoring.

- `TASKS_DIR` holds `gsm8k_local.yaml`, task `mrbench_gsm8k_local`: lm-eval's `gsm8k` (v3)
  prompt, generation settings, filters and metric on a local JSONL, zero-shot. Pass it to
  lm-eval with `--include_path` (the YAML's header says why each difference from `gsm8k`).
- `gsm8k_dataset` is that task's `custom_dataset`: it finds the JSONL at run time.
- `score_responses` scores responses with lm-eval's own code (the task's filter ensembles and
  its `exact_match` metric, driven the way lm-eval's evaluator drives them), one result per
  sample; `mrbench.workloads.gsm8k_scoring.score_all(..., scorer="lm-eval")` uses it.
"""
from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Sequence

from mrbench.contract import data_dir

TASKS_DIR = Path(__file__).resolve().parent / "lm_eval_tasks"
TASK_NAME = "mrbench_gsm8k_local"
DATA_FILE_ENV = "MRBENCH_GSM8K_JSONL"
FILTERS = ("strict-match", "flexible-extract")     # the task's filter_list names, in order


def default_data_file() -> Path:
    """$MRBENCH_GSM8K_JSONL, else $MRBENCH_DATA_DIR/gsm8k/test.jsonl (default: ../shared/data
    next to the checkout, as the tests and CI use)."""
    if os.environ.get(DATA_FILE_ENV):
        return Path(os.environ[DATA_FILE_ENV])
    return data_dir() / "gsm8k" / "test.jsonl"


def gsm8k_dataset(data_file: str | None = None, docs: Sequence[dict] | None = None,
                  **_metadata: Any):
    """The task's `custom_dataset`. lm-eval calls it with the task metadata (its YAML
    `metadata`, `--metadata` and `--model_args` merged), so `--metadata data_file=PATH` picks
    the file; everything else in the metadata is ignored. `docs` (in-process only) gives the
    documents directly, for `score_responses`."""
    import datasets  # lazy: only the lm-eval scorer and task need it (lm-eval's dependency)

    if docs is not None:
        return datasets.DatasetDict({"test": datasets.Dataset.from_list(list(docs))})
    path = Path(data_file) if data_file else default_data_file()
    if not path.is_file():
        raise FileNotFoundError(
            f"{TASK_NAME}: GSM8K JSONL {path} does not exist; pass --metadata data_file=PATH, "
            f"or set {DATA_FILE_ENV} or MRBENCH_DATA_DIR (write generated problems with "
            "`python -m mrbench.workloads.gsm8k_problems --write PATH`)")
    ds = datasets.load_dataset("json", data_files={"test": str(path)})
    missing = {"question", "answer"} - set(ds["test"].column_names)
    if missing:
        raise ValueError(f"{TASK_NAME}: {path} needs string fields 'question' and 'answer' "
                         f"on every line (missing: {', '.join(sorted(missing))})")
    return ds


@contextmanager
def _quiet_lm_eval():
    """lm-eval logs at INFO/WARNING while it builds a task (e.g. that `custom_dataset` takes
    --metadata); inside a workload that is noise, and real problems still raise."""
    log = logging.getLogger("lm_eval")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def load_task(docs: Sequence[dict] | None = None, data_file: str | None = None):
    """The `mrbench_gsm8k_local` Task, built by lm-eval's TaskManager from the shipped YAML."""
    from lm_eval.tasks import TaskManager  # lazy: lm-eval is optional and slow to import

    meta: dict[str, Any] = {}
    if docs is not None:
        meta["docs"] = list(docs)
    if data_file is not None:
        meta["data_file"] = str(data_file)
    tm = TaskManager(include_path=str(TASKS_DIR), include_defaults=False, metadata=meta)
    return tm.load([TASK_NAME])["tasks"][TASK_NAME]


def score_responses(responses: Sequence[str], references: Sequence[str],
                    questions: Sequence[str] | None = None
                    ) -> list[tuple[bool, bool, str, str]]:
    """Per-sample strict/flexible exact match of each response against its dataset answer
    (the full `answer` field, ending in '#### N'), computed by lm-eval: the responses become
    the task's Instance responses, `task.apply_filters()` runs its two filter ensembles and
    `task.process_results` its exact_match, exactly as lm-eval's evaluator does. One
    (strict, flexible, strict_answer, flexible_answer) per response, the fields of
    `gsm8k_scoring.Score` (plain tuples: this module stays below the scoring module)."""
    if len(responses) != len(references):
        raise ValueError(f"{len(responses)} responses but {len(references)} references")
    if not responses:
        return []
    questions = questions if questions is not None else [""] * len(references)
    with _quiet_lm_eval():
        task = load_task(docs=[{"question": q, "answer": a}
                               for q, a in zip(questions, references)])
        task.build_all_requests(limit=None, rank=0, world_size=1)
    by_doc = {}
    for inst in task.instances:
        inst.resps.append(responses[inst.doc_id])   # repeats: 1, one generation per doc
        by_doc[inst.doc_id] = inst
    task.apply_filters()
    out = []
    for doc_id, doc in task.doc_iterator(rank=0, limit=None, world_size=1):
        inst = by_doc[doc_id]
        strict, flexible = (task.process_results(doc, [inst.filtered_resps[f]])["exact_match"]
                            for f in FILTERS)
        out.append((bool(strict), bool(flexible), inst.filtered_resps[FILTERS[0]],
                    inst.filtered_resps[FILTERS[1]]))
    if len(out) != len(responses):
        raise RuntimeError(f"lm-eval scored {len(out)} of {len(responses)} responses")
    return out
