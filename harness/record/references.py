"""Stored op and allocation counts of a known-good candidate, per engine build.

Op counts per step are deterministic for a fixed batch sequence, so a candidate can be held
to its own earlier counts exactly (asv keeps benchmark history the same way). A V2-vs-V1
comparison cannot do this: the runners differ by design. References are keyed by what
changes the counts (target, runner, device, dtype, torch version) and carry the workload's
parameters hash, so a reference is never applied to a different workload shape; each entry
also records vLLM's version and commit and the model, and an entry of another build is "not
measured" with the reason, never an alarm. In a run of one runner on both sides (two builds)
the baseline's own counts are the reference instead (counts.counts_vs_baseline). They are
committed under results/baselines/ and rewritten with `mrbench run ... --save-reference`.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

REF_DIR = Path(__file__).resolve().parents[2] / "results" / "baselines" / "op-counts"
# Do not change the profiled pass: limits and scoring, and a sweep's lists (`ks`,
# `proposers`, `batch_sizes`): each point of a sweep is its own entry, defined by its own
# `k` / `proposer` / `batch_size`, so adding a point to a sweep keeps the others' references.
# `min_prefill_chunks` (gsm8k) only asks the coverage check to look; nothing runs differently.
IGNORED_PARAMS = ("limit", "wave_size", "scorer", "ks", "proposers", "batch_sizes",
                  "min_prefill_chunks")


def build_key(resolved: dict[str, Any]) -> str:
    """The reference file's name: engine, runner, device, dtype, torch, and the model's
    folder where the target names one (the vllm target: its GPU default and `--model tiny`
    each keep their own counts; the bundled target's model is part of its build)."""
    ver = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    model = resolved.get("model")
    parts = [resolved.get("target"), resolved.get("runner"),
             str(resolved.get("device", "cpu")).split(":")[0], resolved.get("dtype"),
             f"torch{ver}"] + ([Path(str(model)).name]
                               if model and resolved.get("target") == "vllm" else [])
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(str(p) for p in parts))


def reference_key(resolved: dict[str, Any]) -> dict[str, Any]:
    """Everything a count depends on, stored with each entry: the file name keys the
    engine, runner, device, dtype and torch; vLLM's version and commit and the model (by
    its folder's name) are checked when the entry is read (`key_mismatch`)."""
    model = resolved.get("model")
    return dict(target=resolved.get("target"), runner=resolved.get("runner"),
                device=str(resolved.get("device", "cpu")).split(":")[0],
                dtype=resolved.get("dtype"), torch=torch.__version__.split("+")[0],
                vllm_version=resolved.get("vllm_version"),
                vllm_commit=resolved.get("vllm_commit"),
                model=Path(str(model)).name if model else None)


def key_mismatch(entry: dict[str, Any], resolved: dict[str, Any]) -> str | None:
    """Why a stored entry is not this build's ("vllm_version 0.26.0, this build 0.27.0"),
    or None when it is. Fields the entry did not record are not compared."""
    stored, now = entry.get("key") or {}, reference_key(resolved)
    for f in ("vllm_version", "vllm_commit", "model"):
        if f in stored and stored[f] != now[f]:
            return f"{f} {stored[f]}, this build {now[f]}"
    return None


def params_hash(params: dict[str, Any]) -> str:
    keep = {k: v for k, v in sorted(params.items()) if k not in IGNORED_PARAMS}
    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:16]


def count_means(profile: list[dict]) -> dict[str, float]:
    """Mean per profiled step of every ops_* / allocs column."""
    if not profile:
        return {}
    cols = [c for c in profile[0] if c == "ops" or c.startswith("ops_") or c == "allocs"]
    return {c: float(np.mean([r[c] for r in profile if r.get(c) is not None])) for c in cols}


LAUNCH_COLUMNS = ("launches", "graph_launches")


def launch_means(profile: list[dict]) -> dict[str, float]:
    """Mean per profiled step of every kernel-launch column (`launches`, `launches_*`,
    `graph_launches`, `graph_launches_*`); empty where the pass counted none (CPU)."""
    if not profile:
        return {}
    cols = [c for c in profile[0] if c in LAUNCH_COLUMNS
            or c.startswith(tuple(f"{k}_" for k in LAUNCH_COLUMNS))]
    return {c: float(np.mean([r[c] for r in profile if r.get(c) is not None])) for c in cols}


def _path(key: str, ref_dir: Path) -> Path:
    return ref_dir / f"{key}.json"


def load(resolved: dict, workload_id: str, params: dict, ref_dir: Path = REF_DIR) -> dict | None:
    p = _path(build_key(resolved), ref_dir)
    if not p.is_file():
        return None
    entry = json.loads(p.read_text()).get(workload_id)
    if not entry or entry.get("params_hash") != params_hash(params):
        return None
    return entry


def save(resolved: dict, entries: dict[str, dict], ref_dir: Path = REF_DIR) -> Path:
    """Merge {workload_id: {"params": ..., "profile": rows, "git_sha": ...}} into the file
    for this build, atomically."""
    ref_dir.mkdir(parents=True, exist_ok=True)
    p = _path(build_key(resolved), ref_dir)
    data = json.loads(p.read_text()) if p.is_file() else {}
    for wid, e in entries.items():
        data[wid] = dict(params_hash=params_hash(e["params"]),
                         counts={**count_means(e["profile"]), **launch_means(e["profile"])},
                         steps=len(e["profile"]), git_sha=e.get("git_sha"),
                         key=reference_key(resolved))
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=ref_dir)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, p)
    return p
