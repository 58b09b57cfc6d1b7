"""The open-loop arrival loop every target serves timed requests with.

Open loop means each request is added at its arrival time whether or not the engine keeps
up (as `vllm bench serve` replays a trace): a slow runner builds a queue, and the queueing
shows in its TTFT, which is what a serving user would see. A closed loop would hide it.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

from mrbench.contract import TimedPrompt

IDLE_POLL_S = 0.05     # longest sleep while the engine is idle and the next arrival is ahead


def replay(requests: Sequence[TimedPrompt],
           add: Callable[[TimedPrompt, float], str],
           step: Callable[[], None],
           has_unfinished: Callable[[], bool]) -> list[str]:
    """Drive one engine through `requests` open loop; returns each request's engine id, in
    request order.

    `add(request, arrival_time)` submits one request (arrival_time: host perf_counter
    seconds when it was due) and returns its id; `step()` runs one engine step;
    `has_unfinished()` says whether any submitted request is still running."""
    order = sorted(range(len(requests)), key=lambda i: requests[i].arrival_s)
    ids: dict[int, str] = {}
    t0 = time.perf_counter()
    nxt = 0
    while nxt < len(order) or has_unfinished():
        now = time.perf_counter() - t0
        while nxt < len(order) and requests[order[nxt]].arrival_s <= now:
            r = requests[order[nxt]]
            ids[order[nxt]] = add(r, t0 + r.arrival_s)
            nxt += 1
        if has_unfinished():
            step()
        elif nxt < len(order):              # idle until the next arrival
            time.sleep(max(0.0, min(requests[order[nxt]].arrival_s - now, IDLE_POLL_S)))
    return [ids[i] for i in range(len(requests))]
