"""Where an engine start's time went, for the manifest (`engines.starts[].phases`), the
progress line's "engine ready" and the report's table of starts.

Why: a start is most of a vLLM run's time on a fresh GPU machine (docs/performance.md, "Time to
verdict on the vllm target"), and what it spends is not one thing: a new process's imports, vLLM's
model inspection and compile, graph capture, the runner's warmup. A change meant to shorten one of
them is judged by this split, run by run, not by the total.
"""
from __future__ import annotations


def phases_of(t0: float, clock: dict[str, float], phases: dict[str, float | None]
              ) -> dict[str, float | None]:
    """Where an engine start's time went (seconds; the manifest's engines.starts[].phases):
    `process_s`, a new process's interpreter and the harness's imports (from the harness's
    "open" to the child serving; None in a reused process); `open_s`, the child's open
    call; and the target's own split of it (`VllmSession.start_phases`: before_engine_s,
    vLLM's import and the harness's setup; engine_s, the LLM(...) calls; compile_s, vLLM's
    own compile seconds in them; after_engine_s, the harness's instrumentation)."""
    out: dict[str, float | None] = {}
    if clock:
        since = clock.get("serving_since")
        out["process_s"] = round(since - t0, 3) if since is not None and since >= t0 else None
        if "opened" in clock and "ready" in clock:
            out["open_s"] = round(clock["ready"] - clock["opened"], 3)
    out.update(phases)
    return out


_PHASE_WORDS = (("process_s", "process"), ("before_engine_s", "imports and setup"),
                ("engine_s", "LLM()"), ("compile_s", "compile"),
                ("after_engine_s", "instrumentation"))


def describe_phases(phases: dict[str, float | None]) -> str:
    """"process 3.0 s, imports and setup 24.1 s, LLM() 62.0 s, compile 15.1 s, ..." for the
    progress line ("" where the start kept no account)."""
    return ", ".join(f"{word} {phases[k]:.1f} s" for k, word in _PHASE_WORDS
                     if isinstance(phases.get(k), (int, float)))
