"""Kernel tables: per shape, the time, TFLOPS, roofline efficiency and correctness of one record, and
the per-shape comparison of a candidate against a baseline (pure, plus rich rendering).

One *observation* is one trial (the median of its timed iterations), so the statistics of
`toolkit.analysis.stats` see trial-to-trial spread, as they see run-to-run spread elsewhere. A shape
where the candidate's output fails its correctness check is "wrong output", whatever its time: a
kernel that returns zeros is fast. A shape where the baseline is wrong and the candidate right is
"fixed"; where the reference itself did not resemble the inputs, "no check".
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

from rich.table import Table

from toolkit.analysis import stats
from toolkit.kernels.floor import floor, gpu_of
from toolkit.kernels.registry import OPS, flops
from toolkit.roofline import get_gpu

WRONG = "wrong output"
FIXED = "fixed (baseline wrong)"
NO_CHECK = "no check (reference broken)"
ERROR = "error"
SKIPPED = "skipped"  # a shape the backend cannot take (the probe says why): not run, not an error


@dataclass(frozen=True)
class Row:
    label: str
    dims: dict
    points: list
    status: str  # "ok" | "error" | "skipped"
    verdict: str  # correctness: ok | wrong | all-zero | non-finite | reference-broken | error
    trial_ms: list  # median of each trial
    median_ms: float
    tflops: float
    floor_ms: float | None
    bound: str | None
    efficiency: float | None  # floor / measured
    max_relative_error: float | None
    within_tolerance: float | None
    error: str = ""

    def key(self) -> tuple:
        return (self.label, tuple(sorted(self.dims.items())))

    def to_dict(self) -> dict:
        """JSON-safe: non-finite numbers (an errored shape's time) become null."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def rows(record: dict) -> list[Row]:
    op = OPS.get(record["op"])
    gpu = gpu_of(record.get("recipe_resolved") or {})
    gpu = get_gpu(gpu) if (op and gpu) else None  # gpus.toml read once per table, not per shape
    out = []
    for res in record["results"]:
        dims = res["shape"]
        base = dict(label=res.get("label", ""), dims=dims, points=res.get("points", []))
        if res.get("status") != "ok":
            status = SKIPPED if res.get("status") == SKIPPED else ERROR
            out.append(Row(**base, status=status, verdict=status, trial_ms=[], median_ms=math.nan, tflops=math.nan,
                           floor_ms=None, bound=None, efficiency=None, max_relative_error=None,
                           within_tolerance=None, error=res.get("error", "")))
            continue
        trial_ms = [statistics.median(t) for t in res["times_ms"] if t]
        med = statistics.median(trial_ms) if trial_ms else math.nan
        corr = res.get("correctness", {})
        f = floor(op, dims, gpu, corr.get("touched_experts")) if (op and gpu) else None
        out.append(Row(**base, status="ok", verdict=corr.get("verdict", "unchecked"), trial_ms=trial_ms,
                       median_ms=med, tflops=(flops(op, dims) / (med * 1e-3) / 1e12) if op and med > 0 else math.nan,
                       floor_ms=f.time_s * 1e3 if f else None, bound=f.bound if f else None,
                       efficiency=(f.time_s * 1e3 / med) if f and med > 0 else None,
                       max_relative_error=corr.get("max_relative_error"),
                       within_tolerance=corr.get("within_tolerance")))
    return out


@dataclass(frozen=True)
class ShapeComparison:
    label: str
    dims: dict
    base: Row
    cand: Row
    speedup: float  # > 1: the candidate is faster (baseline time / candidate time)
    speedup_ci: tuple
    p_value: float
    verdict: str

    def to_dict(self) -> dict:
        fin = lambda x: x if isinstance(x, (int, float)) and math.isfinite(x) else None  # noqa: E731
        return {"label": self.label, "dims": self.dims, "speedup": fin(self.speedup),
                "speedup_ci": [fin(x) for x in self.speedup_ci], "p_value": fin(self.p_value), "verdict": self.verdict, "baseline": self.base.to_dict(),
                "candidate": self.cand.to_dict()}


def compare(base: dict, cand: dict, *, min_effect: float = stats.DEFAULT_MIN_EFFECT) -> list[ShapeComparison]:
    """Per shape both records measured: the candidate's speedup with its CI and the verdict."""
    by_key = {r.key(): r for r in rows(base)}
    out = []
    for c in rows(cand):
        b = by_key.get(c.key())
        if b is None:
            continue
        cmp = stats.compare_values(b.trial_ms, c.trial_ms, higher_is_better=False, unit="ms", min_effect=min_effect)
        if SKIPPED in (c.status, b.status):
            verdict = SKIPPED
        elif c.status != "ok" or b.status != "ok":
            verdict = ERROR
        elif c.verdict == "reference-broken" or b.verdict == "reference-broken":
            verdict = NO_CHECK
        elif c.verdict != "ok":
            verdict = WRONG
        elif b.verdict != "ok":
            verdict = FIXED
        else:
            verdict = cmp.verdict
        ok = c.status == "ok" and b.status == "ok"
        out.append(ShapeComparison(c.label, c.dims, b, c, cmp.speedup if ok else math.nan,
                                   cmp.speedup_ci if ok else (math.nan, math.nan), cmp.p_value, verdict))
    return out


# ------------------------------------------------------------------------------------------ rendering


def _dims(d: dict) -> str:
    return " x ".join(str(v) for v in d.values())


def _f(x, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def render_rows(record: dict) -> Table:
    from toolkit.kernels.server_runner import not_the_servers

    op = record["op"]
    dims = " x ".join(OPS[op].dims) if op in OPS else "dims"
    t = Table(title=f"{record['recipe']}: {op} ({record.get('backend')}) on "
                    f"{(record.get('probe') or {}).get('gpu') or (record.get('probe') or {}).get('device', '?')}"
                    + (f" - {other.upper()}" if (other := not_the_servers(record)) else ""),
              title_justify="left")
    for h in ("shape", dims, "points", "median us", "TFLOPS", "floor us", "efficiency", "max rel err", "in tol",
              "check"):
        t.add_column(h, justify="left" if h in ("shape", "check") else "right")
    for r in rows(record):
        t.add_row(r.label, _dims(r.dims), ",".join(map(str, r.points)) or "-", _f(r.median_ms * 1e3, ".1f"),
                  _f(r.tflops, ".3g"), _f(r.floor_ms * 1e3 if r.floor_ms else None, ".2f"),
                  _f(r.efficiency * 100 if r.efficiency is not None else None, ".3g") + ("%" if r.efficiency else ""),
                  _f(r.max_relative_error, ".2e"), _f(r.within_tolerance, ".3f"),
                  r.verdict if r.status == "ok" else f"{r.status}: {r.error[:60]}")
    return t


def render_compare(items: list[ShapeComparison], title: str) -> Table:
    t = Table(title=title, title_justify="left")
    for h in ("shape", "dims", "baseline us", "candidate us", "speedup [95% CI]", "p", "cand. eff.", "cand. check",
              "verdict"):
        t.add_column(h, justify="left" if h in ("shape", "verdict", "cand. check") else "right")
    for c in items:
        lo, hi = c.speedup_ci
        color = {"faster": "green", "slower": "red", WRONG: "bold red", ERROR: "red"}.get(c.verdict, "")
        t.add_row(c.label, _dims(c.dims), _f(c.base.median_ms * 1e3, ".1f"), _f(c.cand.median_ms * 1e3, ".1f"),
                  f"{_f(c.speedup, '.3f')} [{_f(lo, '.3f')}, {_f(hi, '.3f')}]", _f(c.p_value, ".3f"),
                  (_f(c.cand.efficiency * 100, ".3g") + "%") if c.cand.efficiency is not None else "-",
                  c.cand.verdict, f"[{color}]{c.verdict}[/]" if color else c.verdict)
    return t
