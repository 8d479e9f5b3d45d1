"""Reports of stored results: a Markdown table for a pull request and one self-contained HTML page.

`collect(store, recipes)` gathers what a report shows (provenance per recipe, per-repeat values per
metric and point, comparisons against the first recipe, efficiency against the roofline) into a
`ReportData`; `render_markdown(data)` and `render_html(data)` turn it into text. The HTML page has
no external resources: styles are inline and the plots are SVG drawn here (`line_plot`, `bar_plot`).

`efficiency(run, samples)` (measured tok/s at batch/concurrency 1 over the recipe's theoretical
roofline) is the one implementation, shared with `patchbench results`.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import PurePath
from typing import Any, Iterable, Sequence

# Throughput metrics, in order of preference, for headlines, efficiency and the throughput plot.
HEADLINE = ("output_tok_s", "median_decode_throughput", "decode_tok_s")
THROUGHPUT_METRICS = ("output_tok_s", "decode_tok_s", "median_decode_throughput", "output_throughput",
                      "total_tok_s")
LATENCY_METRICS = ("itl_ms_median", "tpot_ms_mean", "tpot_ms_median", "itl_ms_mean", "ttft_ms_median",
                   "median_decode_latency", "decode_step_ms_median")
# Metrics a report shows by default (those stored, in this order); all stored ones when none is.
DEFAULT_METRICS = ("output_tok_s", "decode_tok_s", "median_decode_throughput", "itl_ms_median",
                   "tpot_ms_mean", "ttft_ms_median")


# -- efficiency against the roofline ----------------------------------------------------------------

@dataclass(frozen=True)
class Efficiency:
    """Measured `metric` at point 1 (mean over the samples given) against the theoretical roofline."""

    metric: str
    measured: float
    theoretical: float
    model: str
    gpu: str
    n: int = 1

    @property
    def fraction(self) -> float:
        return self.measured / self.theoretical if self.theoretical else float("nan")

    def text(self) -> str:
        return f"{self.measured:.2f} of {self.theoretical:.0f} tok/s ({100 * self.fraction:.1f}%)"


def efficiency(run: Any, samples: Iterable[Any]) -> Efficiency | None:
    """Measured tok/s at batch/concurrency 1 over the theoretical roofline of `run`'s recipe, when
    its resolved `[roofline]` table names a model and a GPU (tp/ep from the server args). The
    first HEADLINE metric measured at point 1 counts (mean of its samples). None otherwise."""
    resolved = getattr(run, "recipe_resolved", None) or {}
    roof = resolved.get("roofline") or {}
    if not roof.get("model") or not roof.get("gpu"):
        return None
    at_one: dict[str, list[float]] = {}
    for s in samples:
        if s.point == 1 and s.metric in HEADLINE:
            at_one.setdefault(s.metric, []).append(float(s.value))
    metric = next((m for m in HEADLINE if at_one.get(m)), None)
    if metric is None:
        return None
    server = resolved.get("server") or {}
    args = dict(server.get("args") or {}) if isinstance(server, dict) else {}
    try:
        tp = int(args.get("tp-size", args.get("tp", 1)))
        ep = int(args.get("ep-size", args.get("ep", 1)))
        from toolkit.roofline import theoretical_tok_s

        theo = theoretical_tok_s(roof["model"], roof["gpu"], tp=tp, ep=ep, batch=1,
                                 context=int(roof.get("context", 0)), weights=roof.get("weights"))
    except Exception:  # noqa: BLE001 - efficiency is a courtesy figure
        return None
    if not theo or not math.isfinite(theo):
        return None
    vals = at_one[metric]
    return Efficiency(metric, sum(vals) / len(vals), float(theo), str(roof["model"]), str(roof["gpu"]),
                      len(vals))


# -- the data of a report ---------------------------------------------------------------------------

@dataclass(frozen=True)
class RecipeSummary:
    """One recipe's provenance (from its newest selected run) and the runs the report uses."""

    name: str
    run_ids: tuple[str, ...]
    verified: bool  # every selected run had its configuration verified
    sglang_version: str | None
    flashinfer_version: str | None
    tree_hashes: dict
    patches: dict  # source -> [patch names]
    gpu: str
    env_key: str | None = None
    efficiency: Efficiency | None = None


@dataclass
class ReportData:
    title: str
    recipes: tuple[RecipeSummary, ...]
    metrics: tuple[str, ...]
    units: dict  # metric -> unit
    point_kinds: dict  # metric -> "batch" | "concurrency"
    values: dict  # (recipe, metric, point) -> tuple of per-repeat values
    rows: tuple = ()  # CompareRow, variants against recipes[0]
    differences: dict = field(default_factory=dict)  # variant -> provenance differences vs recipes[0]
    notes: tuple[str, ...] = ()
    generated_at: str = ""

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.recipes]

    @property
    def baseline(self) -> str:
        return self.recipes[0].name

    def points(self, metric: str) -> list[int]:
        return sorted({p for (_, m, p) in self.values if m == metric})

    def compare_row(self, recipe: str, metric: str, point: int):
        for r in self.rows:
            if r.recipe == recipe and r.metric == metric and r.point == point:
                return r
        return None


def _patch_names(patches: Any) -> dict[str, list[str]]:
    if not isinstance(patches, dict):
        return {}
    out = {}
    for src, items in patches.items():
        names = []
        for p in items if isinstance(items, (list, tuple)) else [items]:
            if isinstance(p, dict):
                p = p.get("name") or p.get("path") or str(p)
            names.append(PurePath(str(p)).name or str(p))
        out[str(src)] = names
    return out


def collect(store: Any, recipes: Sequence[str], metrics: Sequence[str] | None = None, *,
            title: str | None = None) -> ReportData:
    """Everything a report shows for `recipes` (the first is the baseline) from `store`.

    Runs: status ok, verified ones when a recipe has any (else its unverified ones, flagged), and
    only those of the baseline's newest benchmark (`bench_key`) where a recipe has such runs.
    Raises BadInput when a recipe has no ok run at all."""
    from toolkit.analysis.compare import compare_recipes, diff_provenance, observations
    from toolkit.provenance import run_env_differences
    from toolkit.errors import BadInput

    names = list(dict.fromkeys(recipes))
    if not names:
        raise BadInput("report needs at least one recipe")
    ok = store.runs(recipe=names, status="ok")
    by_recipe: dict[str, list] = {n: [r for r in ok if r.recipe == n] for n in names}
    missing = [n for n in names if not by_recipe[n]]
    if missing:
        raise BadInput(f"no ok results for recipe{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                       f"in {store.path}", hint="run them first (patchbench run RECIPE)")
    notes: list[str] = []
    bkey = by_recipe[names[0]][-1].bench_key
    for n in names:
        same = [r for r in by_recipe[n] if r.bench_key == bkey]
        if same and len(same) != len(by_recipe[n]):
            notes.append(f"{n}: {len(by_recipe[n]) - len(same)} run(s) of another benchmark left out")
            by_recipe[n] = same
        elif not same:
            notes.append(f"{n}: measured with a different benchmark than {names[0]}")
        verified = [r for r in by_recipe[n] if r.config_verified is True]
        if verified:
            by_recipe[n] = verified
        else:
            notes.append(f"{n}: configuration not verified; values shown, not compared")

    values: dict[tuple[str, str, int], tuple[float, ...]] = {}
    units: dict[str, str] = {}
    kinds: dict[str, str] = {}
    summaries = []
    for n in names:
        runs = by_recipe[n]
        newest = runs[-1]
        samples = store.samples([r.run_id for r in runs])
        for (metric, point, kind), obs in observations(store, runs).items():
            values[(n, metric, point)] = tuple(obs["values"])
            units.setdefault(metric, obs["unit"])
            kinds.setdefault(metric, kind)
        summaries.append(RecipeSummary(
            name=n, run_ids=tuple(r.run_id for r in runs),
            verified=all(r.config_verified is True for r in runs),
            sglang_version=newest.sglang_version, flashinfer_version=newest.flashinfer_version,
            tree_hashes=dict(newest.tree_hashes or {}),
            patches=_patch_names((newest.extra or {}).get("patches")),
            gpu=newest.gpu_key, env_key=newest.env_key, efficiency=efficiency(newest, samples)))

    stored = {m for (_, m, _) in values}
    if metrics:
        chosen = [m for m in dict.fromkeys(metrics)]
        absent = [m for m in chosen if m not in stored]
        if len(absent) == len(chosen):
            raise BadInput(f"none of the metrics {', '.join(chosen)} was measured for "
                           f"{', '.join(names)}", hint=f"stored: {', '.join(sorted(stored))}")
        if absent:
            notes.append(f"not measured: {', '.join(absent)}")
        chosen = [m for m in chosen if m in stored]
    else:
        chosen = [m for m in DEFAULT_METRICS if m in stored] or sorted(stored)
    values = {k: v for k, v in values.items() if k[1] in chosen}

    rows: list = []
    differences: dict[str, list[str]] = {}
    if len(names) >= 2:
        try:
            rows = compare_recipes(store, names, metrics=chosen, bench_key=bkey, require_verified=True)
        except BadInput as exc:
            notes.append(f"no comparison: {exc}")
        base_run = by_recipe[names[0]][-1]
        for n in names[1:]:
            differences[n] = diff_provenance(base_run, by_recipe[n][-1]) + run_env_differences(base_run, by_recipe[n][-1])
    return ReportData(
        title=title or ("patchbench: " + " vs ".join(names)),
        recipes=tuple(summaries), metrics=tuple(chosen),
        units={m: units.get(m, "") for m in chosen}, point_kinds={m: kinds.get(m, "concurrency") for m in chosen},
        values=values, rows=tuple(rows), differences=differences, notes=tuple(notes),
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))


# -- table contents shared by both renderers --------------------------------------------------------

def _point_label(kind: str, point: int) -> str:
    return f"{'bs' if kind == 'batch' else 'c'}={point}"


def _sources(r: RecipeSummary) -> str:
    parts = []
    if r.sglang_version:
        parts.append(f"sglang {r.sglang_version}")
    if r.flashinfer_version:
        parts.append(f"flashinfer {r.flashinfer_version}")
    parts += [f"{src}@{(h or '?')[:10]}" for src, h in sorted(r.tree_hashes.items())]
    return ", ".join(parts) or "-"


def _patches(r: RecipeSummary) -> str:
    items = [f"{src}: {', '.join(ps)}" for src, ps in sorted(r.patches.items()) if ps]
    return "; ".join(items) or "none"


def _speedup_ci(row) -> tuple[float, float]:
    lo, hi = row.ci_low, row.ci_high
    if row.higher_is_better is False:
        lo, hi = (1.0 / hi if hi else float("inf")), (1.0 / lo if lo else float("inf"))
    return lo, hi


def _speedup_text(row) -> str:
    lo, hi = _speedup_ci(row)
    ci = f" [{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    return f"{row.speedup:.3f}x{ci}"


def recipe_table(data: ReportData) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one row per recipe (sources, patches, GPU, runs, efficiency)."""
    head = ["recipe", "sources", "patches", "GPU", "runs", "vs roofline (point 1)"]
    rows = []
    for r in data.recipes:
        runs = f"{len(r.run_ids)}" + ("" if r.verified else " (unverified)")
        rows.append([r.name, _sources(r), _patches(r), r.gpu, runs,
                     r.efficiency.text() if r.efficiency else "-"])
    return head, rows


def results_table(data: ReportData) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one row per (metric, point, recipe): mean ± std, n, speedup vs the
    baseline with its 95% interval, verdict."""
    from toolkit import stats

    head = ["metric", "point", "recipe", "mean ± std", "n", f"speedup vs {data.baseline} [95% CI]", "verdict"]
    rows = []
    for metric in data.metrics:
        unit = data.units.get(metric, "")
        kind = data.point_kinds.get(metric, "concurrency")
        for point in data.points(metric):
            first = True
            for r in data.recipes:
                vals = data.values.get((r.name, metric, point))
                if vals is None:
                    continue
                s = stats.summarize(vals)
                cell = stats.format_mean_std(s.mean, s.std, unit).replace(" +- ", " ± ")
                if r.name == data.baseline:
                    speed, verdict = "baseline", ""
                else:
                    row = data.compare_row(r.name, metric, point)
                    speed, verdict = (_speedup_text(row), row.verdict) if row else ("-", "")
                rows.append([f"{metric} ({unit})" if first and unit else (metric if first else ""),
                             _point_label(kind, point) if first else "", r.name, cell, str(s.n),
                             speed, verdict])
                first = False
    return head, rows


# -- Markdown -----------------------------------------------------------------------------------------

def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(_md_cell(h) for h in head) + " |",
           "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return out


def efficiency_lines(data: ReportData) -> list[str]:
    return [f"{r.name}: {r.efficiency.text()} ({r.efficiency.metric} at point 1 vs roofline of "
            f"{r.efficiency.model} on {r.efficiency.gpu})" for r in data.recipes if r.efficiency]


def render_markdown(data: ReportData) -> str:
    """The report as Markdown, ready to paste into a pull request."""
    lines = [f"## {data.title}", ""]
    lines += _md_table(*recipe_table(data))
    lines.append("")
    lines += _md_table(*results_table(data))
    lines.append("")
    lines.append("Speedup > 1 means better than the baseline (higher throughput or lower latency); the "
                 "interval is the 95% confidence interval of the ratio of means, the verdict a "
                 "Mann-Whitney U test over per-run values.")
    eff = efficiency_lines(data)
    if eff:
        lines += ["", "**Efficiency vs roofline:** " + "; ".join(eff)]
    if data.differences:
        lines += ["", "### What else differed", ""]
        for name, diffs in data.differences.items():
            lines.append(f"- {data.baseline} -> {name}:" + ("" if diffs else " no other difference recorded"))
            lines += [f"  - {d}" for d in diffs]
    if data.notes:
        lines += ["", "### Notes", ""] + [f"- {n}" for n in data.notes]
    lines += ["", f"<sub>generated by patchbench report, {data.generated_at}</sub>", ""]
    return "\n".join(lines)


# -- SVG plots ----------------------------------------------------------------------------------------

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#7f7f7f", "#bcbd22")
_W, _H = 680, 380
_ML, _MR, _MT, _MB = 72, 170, 40, 56  # margins: left, right (legend), top, bottom


@dataclass(frozen=True)
class Series:
    """One series: `points` are (x, y, lo, hi) (lo/hi: whisker ends, None for none)."""

    name: str
    color: str
    points: tuple


def _esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _fmt_tick(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.10g}" if abs(v) >= 1 else f"{v:.3g}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About `n` round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks, v = [], start
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 12))
        v += step
    if ticks[-1] < hi:
        ticks.append(round(v, 12))
    return ticks


def _frame(title: str, xlabel: str, ylabel: str, yticks: list[float], ymap, legend: Sequence[Series],
           ylabel_fmt=_fmt_tick) -> list[str]:
    pw, ph = _W - _ML - _MR, _H - _MT - _MB
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" '
           f'role="img" class="plot">',
           f"<title>{_esc(title)}</title>",
           f'<rect x="0" y="0" width="{_W}" height="{_H}" fill="#ffffff" class="background"/>',
           f'<text x="{_ML + pw / 2:.1f}" y="22" text-anchor="middle" font-size="15" font-weight="bold">'
           f"{_esc(title)}</text>"]
    for t in yticks:
        y = ymap(t)
        out.append(f'<line x1="{_ML}" y1="{y:.1f}" x2="{_ML + pw}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{_ML - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{_esc(ylabel_fmt(t))}</text>')
    out.append(f'<line x1="{_ML}" y1="{_MT + ph}" x2="{_ML + pw}" y2="{_MT + ph}" stroke="#333"/>')
    out.append(f'<line x1="{_ML}" y1="{_MT}" x2="{_ML}" y2="{_MT + ph}" stroke="#333"/>')
    out.append(f'<text class="xlabel" x="{_ML + pw / 2:.1f}" y="{_H - 12}" text-anchor="middle" '
               f'font-size="12">{_esc(xlabel)}</text>')
    out.append(f'<text class="ylabel" x="16" y="{_MT + ph / 2:.1f}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 16 {_MT + ph / 2:.1f})">{_esc(ylabel)}</text>')
    for i, s in enumerate(legend):
        y = _MT + 10 + 18 * i
        out.append(f'<rect x="{_W - _MR + 16}" y="{y - 9}" width="12" height="12" fill="{s.color}"/>')
        out.append(f'<text x="{_W - _MR + 34}" y="{y + 2}" font-size="12">{_esc(s.name)}</text>')
    return out


def _whisker(x: float, y1: float, y2: float, color: str, half: float = 4.0) -> str:
    return (f'<path class="whisker" d="M{x:.1f},{y1:.1f}V{y2:.1f}M{x - half:.1f},{y1:.1f}H{x + half:.1f}'
            f'M{x - half:.1f},{y2:.1f}H{x + half:.1f}" stroke="{color}" fill="none"/>')


def _finite(*xs: Any) -> bool:
    return all(x is not None and math.isfinite(x) for x in xs)


def line_plot(title: str, xlabel: str, ylabel: str, series: Sequence[Series], *, log2_x: bool = True) -> str:
    """An SVG line plot of `series` (whiskers where lo/hi are given); x on a log2 scale by default;
    the y axis starts at 0."""
    pw, ph = _W - _ML - _MR, _H - _MT - _MB
    xs = sorted({p[0] for s in series for p in s.points})
    tx = (lambda x: math.log2(x)) if log2_x else (lambda x: float(x))
    x0, x1 = (tx(xs[0]), tx(xs[-1])) if xs else (0.0, 1.0)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    ys = [v for s in series for p in s.points for v in (p[1], p[3]) if _finite(v)]
    yticks = nice_ticks(0.0, max(ys) * 1.05 if ys else 1.0)
    ytop = yticks[-1] or 1.0

    def xmap(x):
        return _ML + 12 + (tx(x) - x0) / (x1 - x0) * (pw - 24)

    def ymap(y):
        return _MT + ph - (y / ytop) * ph

    out = _frame(title, xlabel, ylabel, yticks, ymap, series)
    for x in xs:
        out.append(f'<text x="{xmap(x):.1f}" y="{_MT + ph + 16}" text-anchor="middle" font-size="11">{_esc(x)}</text>')
    for s in series:
        pts = sorted((p for p in s.points if _finite(p[1])), key=lambda p: p[0])
        coords = " ".join(f"{xmap(p[0]):.1f},{ymap(p[1]):.1f}" for p in pts)
        out.append(f'<polyline class="series" data-series="{_esc(s.name)}" points="{coords}" fill="none" '
                   f'stroke="{s.color}" stroke-width="2"/>')
        for p in pts:
            out.append(f'<circle cx="{xmap(p[0]):.1f}" cy="{ymap(p[1]):.1f}" r="3.5" fill="{s.color}"/>')
            if _finite(p[2], p[3]):
                out.append(_whisker(xmap(p[0]), ymap(p[2]), ymap(p[3]), s.color))
    out.append("</svg>")
    return "\n".join(out)


def bar_plot(title: str, xlabel: str, ylabel: str, categories: Sequence[str], series: Sequence[Series], *,
             ref: float | None = None, ylabel_fmt=_fmt_tick) -> str:
    """An SVG grouped bar plot: one group per category, one bar per series (points are
    (category index, value, lo, hi)), whiskers where lo/hi are given, a dashed line at `ref`."""
    pw, ph = _W - _ML - _MR, _H - _MT - _MB
    ys = [v for s in series for p in s.points for v in (p[1], p[3]) if _finite(v)]
    if ref is not None:
        ys.append(ref)
    yticks = nice_ticks(0.0, max(ys) * 1.08 if ys else 1.0)
    ytop = yticks[-1] or 1.0

    def ymap(y):
        return _MT + ph - (max(y, 0.0) / ytop) * ph

    out = _frame(title, xlabel, ylabel, yticks, ymap, series, ylabel_fmt)
    ncat, nser = max(len(categories), 1), max(len(series), 1)
    gw = pw / ncat
    bw = gw * 0.8 / nser
    for i, c in enumerate(categories):
        out.append(f'<text x="{_ML + gw * (i + 0.5):.1f}" y="{_MT + ph + 16}" text-anchor="middle" '
                   f'font-size="11">{_esc(c)}</text>')
    for j, s in enumerate(series):
        for p in s.points:
            if not _finite(p[1]):
                continue
            x = _ML + gw * p[0] + gw * 0.1 + bw * j
            y = ymap(p[1])
            out.append(f'<rect class="series" data-series="{_esc(s.name)}" x="{x:.1f}" y="{y:.1f}" '
                       f'width="{bw * 0.92:.1f}" height="{_MT + ph - y:.1f}" fill="{s.color}">'
                       f"<title>{_esc(s.name)}: {p[1]:.3g}</title></rect>")
            if _finite(p[2], p[3]):
                out.append(_whisker(x + bw * 0.46, ymap(p[2]), ymap(p[3]), "#222"))
    if ref is not None:
        out.append(f'<line class="ref" x1="{_ML}" y1="{ymap(ref):.1f}" x2="{_ML + pw}" y2="{ymap(ref):.1f}" '
                   f'stroke="#444" stroke-dasharray="5,4"/>')
    out.append("</svg>")
    return "\n".join(out)


# -- HTML -----------------------------------------------------------------------------------------------

def _pick(data: ReportData, preferred: Sequence[str], direction: bool) -> str | None:
    from toolkit import stats

    for m in preferred:
        if m in data.metrics:
            return m
    return next((m for m in data.metrics if stats.higher_is_better(m, data.units.get(m)) is direction), None)


def plots(data: ReportData) -> list[str]:
    """The report's SVG plots: throughput and latency vs point, speedup bars, efficiency bars."""
    from toolkit import stats

    color = {r.name: PALETTE[i % len(PALETTE)] for i, r in enumerate(data.recipes)}
    out = []
    chosen = [m for m in (_pick(data, THROUGHPUT_METRICS, True), _pick(data, LATENCY_METRICS, False)) if m]
    for metric in chosen:
        unit = data.units.get(metric, "")
        kind = data.point_kinds.get(metric, "concurrency")
        series = []
        for r in data.recipes:
            pts = []
            for point in data.points(metric):
                vals = data.values.get((r.name, metric, point))
                if vals:
                    s = stats.summarize(vals)
                    pts.append((point, s.mean, s.mean - s.std, s.mean + s.std))
            if pts:
                series.append(Series(r.name, color[r.name], tuple(pts)))
        what = "throughput" if stats.higher_is_better(metric, unit) else "latency"
        out.append(line_plot(f"{what}: {metric} vs {kind} (mean ± std)", f"{kind} (log2 scale)",
                             f"{metric} ({unit})" if unit else metric, series))
    for metric in chosen:
        kind = data.point_kinds.get(metric, "concurrency")
        pts_all = data.points(metric)
        series = []
        for r in data.recipes[1:]:
            pts = []
            for i, point in enumerate(pts_all):
                row = data.compare_row(r.name, metric, point)
                if row is not None:
                    lo, hi = _speedup_ci(row)
                    pts.append((i, row.speedup, lo, hi))
            if pts:
                series.append(Series(r.name, color[r.name], tuple(pts)))
        if series:
            out.append(bar_plot(f"speedup of {metric} vs {data.baseline} (95% CI)", kind,
                                "speedup (> 1: better)", [_point_label(kind, p) for p in pts_all], series,
                                ref=1.0))
    effs = [r for r in data.recipes if r.efficiency]
    if effs:
        series = [Series(r.name, color[r.name], ((0, 100 * r.efficiency.fraction, None, None),)) for r in effs]
        out.append(bar_plot("efficiency vs decode roofline at point 1", "recipes at batch/concurrency 1",
                            "% of theoretical tok/s",
                            [""], series, ref=100.0 if max(100 * r.efficiency.fraction for r in effs) > 50 else None))
    return out


def _html_table(head: list[str], rows: list[list[str]], cls: str) -> str:
    out = [f'<table class="{cls}"><thead><tr>' + "".join(f"<th>{_esc(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for row in rows:
        verdict = row[-1] if cls == "results" else ""
        style = {"faster": ' class="faster"', "slower": ' class="slower"'}.get(verdict, "")
        out.append(f"<tr{style}>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
tr.faster td:last-child { color: #1a7f37; font-weight: bold; }
tr.slower td:last-child { color: #cf222e; font-weight: bold; }
.plots svg { margin: 0.5em 1em 0.5em 0; border: 1px solid #eee; }
.note { color: #666; font-size: 12px; }
"""


def render_html(data: ReportData) -> str:
    """One self-contained HTML page: the tables, inline SVG plots, differences, notes."""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{_esc(data.title)}</title>", f"<style>{_CSS}</style></head><body>",
             f"<h1>{_esc(data.title)}</h1>",
             f'<p class="note">generated by patchbench report, {_esc(data.generated_at)}; baseline '
             f"{_esc(data.baseline)}</p>",
             "<h2>Recipes</h2>", _html_table(*recipe_table(data), "recipes"),
             "<h2>Results</h2>", _html_table(*results_table(data), "results"),
             '<p class="note">Speedup &gt; 1 means better than the baseline (higher throughput or lower '
             "latency); the interval is the 95% confidence interval of the ratio of means, the verdict a "
             "Mann-Whitney U test over per-run values.</p>"]
    eff = efficiency_lines(data)
    if eff:
        parts.append("<p><b>Efficiency vs roofline:</b> " + _esc("; ".join(eff)) + "</p>")
    parts += ["<h2>Plots</h2>", '<div class="plots">', *plots(data), "</div>"]
    if data.differences:
        parts.append("<h2>What else differed</h2><ul>")
        for name, diffs in data.differences.items():
            inner = "".join(f"<li>{_esc(d)}</li>" for d in diffs)
            parts.append(f"<li>{_esc(data.baseline)} -&gt; {_esc(name)}: "
                         + (f"<ul>{inner}</ul>" if diffs else "no other difference recorded") + "</li>")
        parts.append("</ul>")
    if data.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_esc(n)}</li>" for n in data.notes) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
