"""Benchmark drivers and the result row they produce.

Every driver and importer turns its measurements into `Sample`s: one metric value at one point of a
sweep (a batch size for static-batch decode, a concurrency for serving). The store keeps samples;
analysis compares samples with the same (metric, point_kind, point).

  serving.py   patchbench's own async streaming client (the "standard decode benchmark");
               workload.py (what it sends) and point.py (what it measured, per point);
               inflight.py (its requests in flight and decoding: where steady decode begins);
               server_account.py (the server's own /metrics account of each measured window)
  sglang_jsonl.py  reading sglang's JSONL results and the importer of `bench_serving` rows
  one_batch.py argv for sglang's static-batch benchmark and the importer of its JSONL rows

Metric names, units and directions live in toolkit.results.metrics (the registry), shared by our client and
the importers, so imported and measured numbers compare:
  concurrency points: output_tok_s, input_tok_s, request_s, ttft_ms_{mean,median,p99,std},
                      itl_ms_{mean,median,p95,p99,max,std}, tpot_ms_{mean,median,p99,std},
                      e2e_ms_{mean,median,p99,std}, completed, failed, duration_s,
                      concurrency_achieved
  batch points:       decode_tok_s, decode_step_ms_median, prefill_ms, prefill_tok_s, total_ms,
                      overall_tok_s
"""

from __future__ import annotations

from dataclasses import dataclass

POINT_KINDS = ("batch", "concurrency")


@dataclass(frozen=True)
class Sample:
    """One measured value: `metric` at `point` (batch size or concurrency, per `point_kind`)."""

    metric: str
    value: float
    unit: str
    point: int
    point_kind: str  # "batch" | "concurrency"

    def __post_init__(self) -> None:
        if self.point_kind not in POINT_KINDS:
            raise ValueError(f"point_kind must be one of {POINT_KINDS}, not {self.point_kind!r}")

    def to_dict(self) -> dict:
        return {
            "metric": self.metric,
            "value": self.value,
            "unit": self.unit,
            "point": self.point,
            "point_kind": self.point_kind,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Sample":
        return cls(str(d["metric"]), float(d["value"]), str(d["unit"]), int(d["point"]),
                   str(d["point_kind"]))


__all__ = ["Sample", "POINT_KINDS"]  # metric names, units, directions: toolkit.results.metrics
