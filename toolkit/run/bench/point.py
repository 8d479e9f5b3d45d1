"""What the serving client measured: per request (`RequestResult`) and per point (`PointResult`),
and the pure statistics that turn one into the other (`summarize`). Metric names and units come from
`toolkit.results.metrics`.

Per request: TTFT, the inter-token latencies (ITL), TPOT and end-to-end latency; per point: token
and request throughput (over the span from the first request sent to the last response finished)
and mean/median/p99 (plus p95/max for ITL) of those. Failed requests are left out of the metrics
and counted in `failed`; their reasons are grouped in `PointResult.errors` ("N x reason").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from toolkit.run.bench import Sample
from toolkit.results.metrics import unit_of

MAX_ERROR_KINDS = 30


@dataclass
class RequestResult:
    """One request as the client saw it (times in seconds)."""

    ok: bool
    start: float = 0.0  # time.perf_counter() when the request was sent
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft: float = 0.0
    e2e: float = 0.0
    itl: list = field(default_factory=list)
    error: str = ""


@dataclass
class PointResult:
    concurrency: int
    requests: int  # measured requests issued at this point (warmup excluded)
    metrics: dict = field(default_factory=dict)  # name -> value (see toolkit.run.bench)
    units: dict = field(default_factory=dict)  # name -> unit
    errors: list = field(default_factory=list)  # "N x reason", most frequent first
    # the server's own account of the measured window (toolkit.run.bench.server_account), None without /metrics
    server: dict | None = None
    # with the benchmark's flush_cache: "flushed" or "not flushed: <why>" (the prefix cache before the point)
    prefix_cache: str | None = None
    # files that appeared in the server's JIT caches during the measured window (None: not watched)
    compiled_files: int | None = None

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_samples(self) -> list[Sample]:
        return [Sample(m, float(v), self.units.get(m, unit_of(m)), self.concurrency, "concurrency")
                for m, v in self.metrics.items()
                if v is not None and not (isinstance(v, float) and math.isnan(v))]

    def to_dict(self) -> dict:
        return {"concurrency": self.concurrency, "requests": self.requests,
                "metrics": dict(self.metrics), "units": dict(self.units),
                "errors": list(self.errors), "server": self.server, "prefix_cache": self.prefix_cache,
                "compiled_files": self.compiled_files}


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default) of already sorted values."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _stats(prefix: str, values_s: list, quantiles: Iterable[str]) -> dict:
    out = {}
    if not values_s:
        return out
    v = sorted(x * 1e3 for x in values_s)
    n = len(v)
    mean = sum(v) / n
    out[f"{prefix}_mean"] = mean
    out[f"{prefix}_median"] = percentile(v, 50)
    for q in quantiles:
        if q == "max":
            out[f"{prefix}_max"] = v[-1]
        else:
            out[f"{prefix}_{q}"] = percentile(v, float(q[1:]))
    out[f"{prefix}_std"] = math.sqrt(sum((x - mean) ** 2 for x in v) / n)
    return out


def summarize(concurrency: int, results: Sequence[RequestResult], duration_s: float,
              extra_errors: Sequence[str] = ()) -> PointResult:
    """Per-point metrics from per-request results (pure)."""
    good = [r for r in results if r.ok]
    failed = len(results) - len(good)
    m: dict = {"completed": float(len(good)), "failed": float(failed), "duration_s": duration_s}
    if good and duration_s > 0:
        out_tokens = sum(r.completion_tokens for r in good)
        in_tokens = sum(r.prompt_tokens for r in good)
        m["output_tok_s"] = out_tokens / duration_s
        m["input_tok_s"] = in_tokens / duration_s
        m["request_s"] = len(good) / duration_s
        m["concurrency_achieved"] = sum(r.e2e for r in good) / duration_s
        m.update(_stats("ttft_ms", [r.ttft for r in good], ("p99",)))
        m.update(_stats("itl_ms", [x for r in good for x in r.itl], ("p95", "p99", "max")))
        tpots = [(r.e2e - r.ttft) / (r.completion_tokens - 1) for r in good
                 if r.completion_tokens > 1]
        m.update(_stats("tpot_ms", tpots, ("p99",)))
        m.update(_stats("e2e_ms", [r.e2e for r in good], ("p99",)))
    counts: dict = {}
    for r in results:
        if not r.ok:
            counts[r.error] = counts.get(r.error, 0) + 1
    for e in extra_errors:
        counts[e] = counts.get(e, 0) + 1
    errors = [f"{n} x {e}" for e, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    if len(errors) > MAX_ERROR_KINDS:
        errors = errors[:MAX_ERROR_KINDS] + [f"... and {len(errors) - MAX_ERROR_KINDS} more kinds"]
    return PointResult(concurrency, len(results), m, {k: unit_of(k) for k in m}, errors)
