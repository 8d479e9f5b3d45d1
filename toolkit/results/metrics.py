"""The metric registry: every metric patchbench stores, in one table (pure).

Each `Metric` has its name (as stored in samples), unit, direction (which way is better), the
sglang JSONL field names it is read from (`aliases`, with `scale` turning sglang's unit into ours:
bench_one_batch reports seconds, we store ms), the kind of point it is measured at, its headline
rank (the metrics a table shows by default, in this order) and a one-line description.

Every table and verb reads this table: the serving client and the importers name and unit their
samples with it, `compare`/`report`/`results`/`attribute`/`bisect` take their defaults, directions
and units from it, and `parse_spec("NAME[@POINT]")` is the one parser of a user's metric (an unknown
name is a BadInput listing the known ones).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from toolkit.errors import BadInput

HIGHER = "higher"
LOWER = "lower"


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    direction: str  # "higher" | "lower": which is better
    description: str
    point_kind: str | None = None  # "concurrency" | "batch" | None (either)
    aliases: tuple[str, ...] = ()  # sglang JSONL field names
    scale: float = 1.0  # our value = alias value * scale
    headline: int | None = None  # rank among the default metrics (1 first); None: not a default

    @property
    def higher_is_better(self) -> bool:
        return self.direction == HIGHER


def _m(*args, **kw) -> Metric:
    return Metric(*args, **kw)


_SERVING = "concurrency"
_BATCH = "batch"
_STAT_WORDS = {"mean": "mean", "median": "median", "p95": "95th percentile", "p99": "99th percentile",
               "max": "maximum", "std": "standard deviation"}
_LATENCIES = {"ttft": ("time to first token", "{s}_ttft_ms", ("mean", "median", "p99", "std")),
              "itl": ("inter-token latency", "{s}_itl_ms", ("mean", "median", "p95", "p99", "max", "std")),
              "tpot": ("time per output token after the first", "{s}_tpot_ms", ("mean", "median", "p99", "std")),
              "e2e": ("end-to-end request latency", "{s}_e2e_latency_ms", ("mean", "median", "p99", "std"))}
_LATENCY_HEADLINE = {"itl_ms_median": 3, "tpot_ms_mean": 4, "ttft_ms_median": 5}

_TABLE: list[Metric] = [
    _m("output_tok_s", "tok/s", HIGHER, "generated tokens per second over the point's span", _SERVING,
       ("output_throughput",), headline=1),
    _m("input_tok_s", "tok/s", HIGHER, "prompt tokens per second over the point's span", _SERVING,
       ("input_throughput",)),
    _m("total_tok_s", "tok/s", HIGHER, "prompt plus generated tokens per second", _SERVING,
       ("total_throughput",)),
    _m("request_s", "req/s", HIGHER, "completed requests per second", _SERVING, ("request_throughput",)),
    _m("concurrency_achieved", "requests", HIGHER, "mean requests in flight (sum of latencies / span)",
       _SERVING, ("concurrency",)),
    _m("completed", "count", HIGHER, "requests that succeeded", _SERVING, ("completed",)),
    _m("failed", "count", LOWER, "requests that failed", _SERVING),
    _m("duration_s", "s", LOWER, "span from the first request sent to the last response", _SERVING,
       ("duration",)),
    *[_m(f"{lat}_ms_{s}", "ms", LOWER, f"{_STAT_WORDS[s]} {what}", _SERVING,
         (alias.format(s=s),), headline=_LATENCY_HEADLINE.get(f"{lat}_ms_{s}"))
      for lat, (what, alias, stats) in _LATENCIES.items() for s in stats],
    _m("decode_tok_s", "tok/s", HIGHER, "median decode throughput of a static batch", _BATCH,
       ("median_decode_throughput",), headline=2),
    _m("decode_step_ms_median", "ms", LOWER, "median decode step latency of a static batch", _BATCH,
       ("median_decode_latency",), 1e3, headline=6),
    _m("prefill_ms", "ms", LOWER, "prefill latency of a static batch", _BATCH, ("prefill_latency",), 1e3),
    _m("prefill_tok_s", "tok/s", HIGHER, "prefill throughput of a static batch", _BATCH,
       ("prefill_throughput",)),
    _m("total_ms", "ms", LOWER, "prefill plus decode latency of a static batch", _BATCH,
       ("total_latency", "overall_latency"), 1e3),
    _m("overall_tok_s", "tok/s", HIGHER, "tokens per second over prefill and decode of a static batch",
       _BATCH, ("overall_throughput",)),
    _m("distinct_experts", "experts", LOWER,
       "distinct experts per MoE layer per decode step, reported by the OEA patch", None,
       ("distinct_experts",), headline=7),
    _m("spec_tokens_per_verify", "tokens", HIGHER,
       "generated tokens per speculative verify pass in the measured window (the server's /metrics)", _SERVING,
       headline=8),
    # The box during the benchmark window (toolkit.run.gpustate): run-level, point 0; absent without GPU state.
    _m("gpu_sm_clock_mhz_median", "MHz", HIGHER, "median SM clock of the run's GPUs over the benchmark window"),
    _m("gpu_mem_clock_mhz_median", "MHz", HIGHER, "median memory clock of the run's GPUs over the benchmark window"),
    _m("gpu_power_w_mean", "W", LOWER, "mean power draw per GPU over the benchmark window"),
    _m("gpu_power_limit_w", "W", HIGHER, "enforced power limit (the lowest of the run's GPUs)"),
    _m("gpu_temp_c_max", "C", LOWER, "highest GPU temperature over the benchmark window"),
    _m("gpu_util_pct_mean", "percent", HIGHER, "mean GPU utilization over the benchmark window"),
    _m("gpu_mem_used_mib_max", "MiB", LOWER, "most GPU memory used on one GPU over the benchmark window"),
    _m("gpu_throttled_share", "share", LOWER, "share of the window with a power, thermal or hardware slowdown"),
    _m("gpu_thermal_throttled_share", "share", LOWER, "share of the window with a thermal slowdown"),
    _m("gpu_power_throttled_share", "share", LOWER, "share of the window at the power cap or power brake"),
    _m("gpu_foreign_processes", "count", LOWER, "processes outside patchbench's tree on the run's GPUs"),
    _m("gpu_ecc_errors_new", "count", LOWER, "uncorrected ECC errors that appeared during the window"),
    _m("gpu_pcie_gen_min", "gen", HIGHER, "PCIe generation seen under load (the lowest GPU)"),
    _m("gpu_pcie_width_min", "lanes", HIGHER, "PCIe link width seen under load (the lowest GPU)"),
    _m("answer_agreement", "share", HIGHER,
       "share of the output check's prompts answered token for token as the reference run did", _SERVING),
    _m("first_divergence", "tokens", HIGHER,
       "median token index of the first difference from the reference run's answer (equal: its length)", _SERVING),
    _m("output_sanity", "share", HIGHER,
       "share of the output check's answers that are not degenerate (empty, one token repeated, "
       "another prompt's answer of 16+ tokens, non-finite logprobs)", _SERVING),
    _m("eval_accuracy", "share", HIGHER, "accuracy of sglang's own evaluation ([quality] eval, e.g. gsm8k)", None),
]

METRICS: dict[str, Metric] = {m.name: m for m in _TABLE}
if len(METRICS) != len(_TABLE):  # pragma: no cover - a programming error in the table
    raise RuntimeError("duplicate metric names in toolkit.results.metrics")


def names() -> list[str]:
    """Every known metric name, in table order."""
    return list(METRICS)


def lookup(name: str) -> Metric | None:
    """The metric called `name`, or None (stored data may hold metrics this version does not know)."""
    return METRICS.get(name)


def get(name: str, *, option: str = "--metric") -> Metric:
    """The metric called `name`; BadInput (exit 2) listing the known names otherwise."""
    m = METRICS.get(name)
    if m is None:
        from toolkit.recipe.values import suggest

        known = f"known metrics: {', '.join(METRICS)}"
        close = suggest(name, METRICS)
        raise BadInput(f"{option} {name}: unknown metric", hint=f"{close} ({known})" if close else known)
    return m


def unit_of(name: str) -> str:
    m = METRICS.get(name)
    return m.unit if m else ""


def higher_is_better(name: str) -> bool | None:
    """True/False from the registry; None for a metric it does not know (verdicts then read
    "higher"/"lower" instead of "faster"/"slower")."""
    m = METRICS.get(name)
    return None if m is None else m.higher_is_better


def headline() -> list[Metric]:
    """The default metrics of tables, by headline rank."""
    return sorted((m for m in _TABLE if m.headline is not None), key=lambda m: m.headline)


def default_names() -> list[str]:
    return [m.name for m in headline()]


def throughput_headline() -> list[str]:
    """Headline throughputs (tok/s, higher is better), by rank: efficiency and the headline column."""
    return [m.name for m in headline() if m.unit == "tok/s" and m.higher_is_better]


def aliases(point_kind: str) -> dict[str, Metric]:
    """sglang JSONL field -> metric, for rows measured at `point_kind` points."""
    return {a: m for m in _TABLE if m.point_kind in (point_kind, None) for a in m.aliases}


@dataclass(frozen=True)
class MetricSpec:
    """`NAME[@POINT]` as given on a command line: a known metric, optionally at one point."""

    metric: str
    point: int | None  # None: every point (tables) or the benchmark's first (bisect, attribute)

    @property
    def info(self) -> Metric:
        return METRICS[self.metric]

    def __str__(self) -> str:
        return self.metric if self.point is None else f"{self.metric}@{self.point}"


_SPEC = re.compile(r"([A-Za-z0-9_]+)(?:@(\d+))?")


def parse_spec(text: str, *, option: str = "--metric") -> MetricSpec:
    """Parse `NAME[@POINT]`; BadInput for bad syntax or an unknown metric (listing the known ones)."""
    m = _SPEC.fullmatch(text.strip())
    if not m:
        raise BadInput(f"{option} `{text}` is not NAME or NAME@POINT (e.g. output_tok_s@1)")
    get(m.group(1), option=option)
    return MetricSpec(m.group(1), int(m.group(2)) if m.group(2) else None)


def parse_specs(texts: list[str] | None, *, option: str = "--metric") -> list[MetricSpec]:
    return [parse_spec(t, option=option) for t in (texts or [])]


def help_text() -> str:
    """The metric list for help pages: "name (unit, higher|lower is better)"."""
    return "; ".join(f"{m.name} ({m.unit}, {m.direction})" for m in _TABLE)


def measured_points(samples, specs: list[MetricSpec]) -> str | None:
    """For asked metrics that were measured, at which points: "output_tok_s measured at
    concurrency 1, 4, 16" (the hint when NAME@POINT names a point that was not measured)."""
    points: dict[str, set] = {}
    kinds: dict[str, str] = {}
    for s in samples:
        if any(spec.metric == s.metric for spec in specs):
            points.setdefault(s.metric, set()).add(int(s.point))
            kinds.setdefault(s.metric, getattr(s, "point_kind", "") or "point")
    parts = [f"{m} measured at {kinds[m]} {', '.join(map(str, sorted(p)))}" for m, p in points.items()]
    return "; ".join(parts) or None
