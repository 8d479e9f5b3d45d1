"""What each measured point adds to its run (pure): samples, errors, and per point the server's
account with the notes that make the point unlike the same point of another launch.

The notes beside the server's own ones (toolkit.run.bench.server_account): kernels compiled during
the window (files the env's JIT caches gained: an env's first launch at new shapes pays them, later
launches do not), and a prefix cache that `[benchmark] flush_cache` could not empty before the point.
"""

from __future__ import annotations

from typing import Sequence

from toolkit.run.bench import Sample
from toolkit.run.bench.point import PointResult


def compiled_note(files: int) -> str:
    return (f"{files} file(s) appeared in the env's JIT caches during this window: kernels compiled while it "
            "was measured (an env's first launch at new shapes; later launches reuse them)")


def unflushed_note(state: str) -> str:
    return (f"the prefix cache was {state} before this point: earlier points' requests may fill the KV pool "
            "during its window")


def gather(points: Sequence[PointResult]) -> tuple[list[Sample], list[str], dict, list[tuple[int, str]]]:
    """(samples, errors, {concurrency: account with its notes}, (concurrency, note) of every note in
    point order). An account exists for a point the server counted (/metrics) or that has a note."""
    samples: list[Sample] = []
    errors: list[str] = []
    accounts = {str(pt.concurrency): pt.server for pt in points if pt.server is not None}
    said: list[tuple[int, str]] = []
    for pt in points:
        samples.extend(pt.to_samples())
        errors.extend(f"concurrency {pt.concurrency}: {e}" for e in pt.errors)
        said += [(pt.concurrency, f"the server says {note}") for note in (pt.server or {}).get("notes", ())]
        extra = []
        if pt.compiled_files:
            accounts.setdefault(str(pt.concurrency), {})["compiled_files"] = pt.compiled_files
            extra.append(compiled_note(pt.compiled_files))
        if pt.prefix_cache is not None:  # `[benchmark] flush_cache`
            accounts.setdefault(str(pt.concurrency), {})["prefix_cache"] = pt.prefix_cache
            if pt.prefix_cache != "flushed":
                extra.append(unflushed_note(pt.prefix_cache))
        if extra:
            acc = accounts[str(pt.concurrency)]
            acc["notes"] = [*acc.get("notes", []), *extra]
            said += [(pt.concurrency, note) for note in extra]
    return samples, errors, accounts, said


def _failed(pt: PointResult) -> bool:
    return bool(pt.metrics.get("failed")) or not pt.metrics.get("completed")


def before_crash(samples: Sequence[Sample], points: Sequence[PointResult], why: str) -> tuple[list[Sample], str]:
    """A server that died during the benchmark: (the samples of the points measured before the first
    point whose requests failed, `why` saying at which point it died and what was kept). A point whose
    requests failed is no measurement of the configuration; the ones before it are, kept with the
    failed run (not counted: only ok runs are)."""
    first = next((pt for pt in points if _failed(pt)), None)
    if first is None:  # no request failed: the server died after the last point
        return list(samples), f"{why} (after the benchmark's last point: its points kept with this failed run)"
    before = [pt.concurrency for pt in points[:points.index(first)]]
    kept = [s for s in samples if s.point in before]
    said = (f"concurrency {', '.join(map(str, before))} measured before it, kept with this failed run"
            if before else "no point measured before it")
    return kept, f"{why} (during the benchmark at concurrency {first.concurrency}; {said})"
