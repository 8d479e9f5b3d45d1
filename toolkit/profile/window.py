"""Which inter-token latencies the profiler recorded, and which it did not (pure).

A profiled step is slower than an unprofiled one (the profiler's own work), and the load's median
ITL mixes both with the ramp-up; so "trace step vs benchmark ITL" cannot tell a trace that misses
part of the step from the profiler's overhead. The load generator knows when each token arrived
(toolkit.run.bench.inflight), and `patchbench profile` knows when /start_profile was answered:

  - sglang starts recording at the step after the request (the one in flight is not recorded), and
    with `num_steps` stops at the start of the step after the last recorded one, then writes the
    traces (the scheduler blocks meanwhile: one long gap). With the overlap scheduler (sglang's
    default) that stop runs before the last recorded step's tokens are sent, so the long gap lands
    one arrival earlier than without it;
  - at steady decode every step gives each request one token.

So for each request that was decoding when the answer came (it had a token before; later requests
start with a prefill and are left out) the arrivals after the answer are numbered 1, 2, ...: arrivals
2 .. steps close the gaps of recorded steps ("profiled"; the last recorded step's gap is left out, it
may hold the trace export), arrivals steps + 1 and steps + 2 are left out (the export, either
scheduler), and arrivals from steps + 3 on are steps with the profiler off ("after"). A gap of k tokens in one
arrival counts k times at 1/k of its length (as the serving benchmark's ITL does); arrivals at the same
time are events one read of the stream delivered (a client lagging the server): each still numbers a
step, and their tokens share the gap since the read before.

The step-time check then reads: trace step vs the profiled ITL (does the trace cover the step?),
and profiled vs after ITL (what the profiler costs a step).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class ItlSplit:
    profiled_ms: float | None  # median ITL of the recorded steps
    after_ms: float | None  # median ITL of the steps after the trace was written
    profiled_tokens: int
    after_tokens: int

    @property
    def overhead(self) -> float | None:
        """How much slower a recorded step was than an unrecorded one (0.05: 5%)."""
        if self.profiled_ms is None or not self.after_ms:
            return None
        return self.profiled_ms / self.after_ms - 1.0

    def to_dict(self) -> dict:
        return {"itl_profiled_ms": self.profiled_ms, "itl_after_ms": self.after_ms,
                "profiled_tokens": self.profiled_tokens, "after_tokens": self.after_tokens,
                "profiler_overhead": self.overhead}


def split(arrivals: Sequence[Sequence[tuple[float, int]]], started: float, steps: int, warmup: int = 0) -> ItlSplit:
    """`arrivals`: per request, (time in s, tokens) of each arrival, oldest first; `started`: when
    /start_profile was answered (same clock); `steps`: the num_steps asked; `warmup`: the first recorded
    steps the breakdown leaves out (toolkit.profile.breakdown), left out here too."""
    inside: list[float] = []
    after: list[float] = []
    for request in arrivals:
        if not request or request[0][0] > started:  # not decoding when recording began
            continue
        prev, j, i = None, 0, 0
        while i < len(request):
            t, group = request[i][0], []
            while i < len(request) and request[i][0] == t:  # events one read delivered (see the docstring)
                j += request[i][0] > started
                group.append((j, request[i][1]))
                i += 1
            tokens = sum(k for _, k in group if k > 0)
            if prev is not None and tokens:
                gap = 1000.0 * (t - prev) / tokens
                for at, k in group:
                    if k > 0 and 2 + warmup <= at <= steps:
                        inside += [gap] * k
                    elif k > 0 and at >= steps + 3:
                        after += [gap] * k
            prev = t
    return ItlSplit(statistics.median(inside) if inside else None, statistics.median(after) if after else None,
                    len(inside), len(after))
