"""The profile's step-time check splits the load's inter-token latencies into the steps the profiler
recorded and the steps after the trace was written (toolkit.profile.window): a trace that covers the
step matches the first, and the second says what the profiler cost."""

from __future__ import annotations

import pytest

from toolkit.profile import window
from toolkit.profile.render import itl_window_line


def _request(start: float, gaps_ms: list[float], k: int = 1) -> list[tuple[float, int]]:
    t, out = start, [(start, 1)]
    for g in gaps_ms:
        t += g / 1000.0
        out.append((t, k))
    return out


def test_recorded_steps_and_the_steps_after_the_trace_are_told_apart():
    steps = 4
    # 10 ms steps before; /start_profile answered at t=1.0 while a step is in flight (arrival 1: 10 ms),
    # the 4 recorded steps take 12 ms, the trace export stalls 500 ms, then 10 ms steps again
    gaps = [10.0] * 5 + [10.0] + [12.0] * steps + [500.0] + [10.0] * 6
    first = 1.0 - 0.0505  # 5 arrivals before the answer
    reqs = [_request(first + i * 1e-4, gaps) for i in range(3)]
    reqs.append(_request(5.0, [30.0] * 20))  # a second-wave request: starts (prefill) after recording began
    got = window.split(reqs, started=1.0, steps=steps)
    # arrivals 2..steps (the last recorded step's may hold the export under the overlap scheduler)
    assert got.profiled_ms == pytest.approx(12.0) and got.profiled_tokens == 3 * (steps - 1)
    assert got.after_ms == pytest.approx(10.0) and got.after_tokens == 3 * 6  # the export stall left out
    assert got.overhead == pytest.approx(0.2)
    line = itl_window_line(12.6, got.to_dict())
    assert "ITL of the recorded steps 12.00 ms (median of 9 tokens): trace step +5.0% vs it" in line
    assert "the profiler made a step +20.0% slower" in line


def test_chunked_arrivals_count_each_token_and_no_step_after_the_trace_is_said():
    # two tokens per arrival: each counts at half the gap, as the serving benchmark's ITL does
    reqs = [_request(0.0, [10.0, 24.0, 24.0, 24.0], k=2)]
    got = window.split(reqs, started=0.005, steps=2)
    assert got.profiled_ms == pytest.approx(12.0) and got.profiled_tokens == 2
    assert got.after_ms is None and got.overhead is None
    assert "no step after the trace" in itl_window_line(12.0, got.to_dict())
    assert itl_window_line(12.0, None) is None


def test_steps_read_in_bursts_share_the_gap_and_keep_their_step_numbers():
    # a lagging client (a busy host) reads three steps' events in one chunk every 30 ms: the same
    # arrival time; each still numbers a step, and their tokens share the 30 ms (was: gaps of 0 ms,
    # a median of 0 and ZeroDivisionError in the step check)
    t, req = 0.0, [(0.0, 1)]
    for i in range(24):
        t += 0.0 if i % 3 else 0.03
        req.append((t, 1))
    got = window.split([req], started=0.001, steps=12)
    assert got.profiled_ms == pytest.approx(10.0) and got.after_ms == pytest.approx(10.0)
    assert got.profiled_tokens == 11 and got.after_tokens == 10  # arrivals 2..12 and 15..24
    assert "trace step +0.0% vs it" in itl_window_line(10.0, got.to_dict())
    # a median of 0 (no read apart at all) says so instead of dividing by it
    zero = {"itl_profiled_ms": 0.0, "profiled_tokens": 9, "itl_after_ms": None}
    assert "no step-time check" in itl_window_line(10.0, zero)


def test_recorded_steps_faster_than_the_later_ones_are_not_called_a_negative_cost():
    got = window.ItlSplit(profiled_ms=10.0, after_ms=15.0, profiled_tokens=9, after_tokens=9)
    line = itl_window_line(10.0, got.to_dict())
    assert "the recorded steps were 33.3% faster than the later ones" in line and "slower" not in line
