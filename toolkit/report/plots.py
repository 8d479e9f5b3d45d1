"""The report's plots, drawn with matplotlib: inline SVG for report.html, PNG files for report.md.

`plots(data)` returns named figures from a `ReportData` (throughput and latency against the point,
speedup bars with their 95% intervals, efficiency against the roofline); `svg(fig)` gives the SVG
text to inline, `write_png(fig, path)` the file a Markdown report links. Figures are built on
`matplotlib.figure.Figure` directly (no pyplot, no global state, no display needed), and SVG output
carries no date and a fixed id salt, so the same data gives the same page.
"""

from __future__ import annotations

import contextlib
import html
import io
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import matplotlib
from matplotlib.figure import Figure

from toolkit.results import metrics

from toolkit.analysis import stats

# Recipe colours: no red or green, which mean worse and better (BETTER/WORSE) in the speedup plots.
PALETTE = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
BETTER, WORSE, UNDECIDED = "#2ca02c", "#d62728", "#b0b0b0"  # a speedup bar: faster, slower, neither
HATCHES = ("", "//", "..", "xx", "\\\\", "oo")  # a speedup bar's recipe, when several are compared
FIGSIZE = (7.2, 4.0)


@dataclass(frozen=True)
class Series:
    """One series: `points` are (x, y, lo, hi) (lo/hi: whisker ends, None for none)."""

    name: str
    color: str
    points: tuple
    colors: tuple | None = None  # per point (bars): overrides `color`
    hatch: str = ""


@dataclass(frozen=True)
class Plot:
    name: str  # file stem: "throughput", "latency", "speedup-<metric>", "efficiency"
    title: str
    figure: Figure


def _finite(*xs: Any) -> bool:
    return all(x is not None and math.isfinite(x) for x in xs)


def _errs(pts: Sequence[tuple]) -> list[list[float]] | None:
    if not any(_finite(p[2], p[3]) for p in pts):
        return None
    # an interval that does not hold its point (never from one rule; a defensive floor) draws no whisker
    return [[max(0.0, p[1] - p[2]) if _finite(p[2]) else 0.0 for p in pts],
            [max(0.0, p[3] - p[1]) if _finite(p[3]) else 0.0 for p in pts]]


def line_plot(title: str, xlabel: str, ylabel: str, series: Sequence[Series], *, log2_x: bool = True) -> Figure:
    """Lines with whiskers (lo/hi) per series; x on a log2 scale by default; y from 0."""
    fig = Figure(figsize=FIGSIZE)
    ax = fig.add_subplot()
    xs = sorted({p[0] for s in series for p in s.points})
    for s in series:
        pts = sorted((p for p in s.points if _finite(p[1])), key=lambda p: p[0])
        if pts:
            c = ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=_errs(pts), color=s.color,
                            marker="o", capsize=3, label=s.name)
            c.lines[0].set_gid(f"series-line {s.name}")
    if log2_x and xs and min(xs) > 0:
        ax.set_xscale("log", base=2)
    if xs:
        ax.set_xticks(xs, [str(x) for x in xs])
    _y_from_zero(ax, series)
    _finish(fig, ax, title, xlabel, ylabel)
    return fig


def bar_plot(title: str, xlabel: str, ylabel: str, categories: Sequence[str], series: Sequence[Series], *,
             ref: float | None = None) -> Figure:
    """Grouped bars: one group per category, one bar per series (points are (category index,
    value, lo, hi)), whiskers where lo/hi are given, a dashed line at `ref`."""
    fig = Figure(figsize=FIGSIZE)
    ax = fig.add_subplot()
    n = max(len(series), 1)
    width = 0.8 / n
    for j, s in enumerate(series):
        pts = [p for p in s.points if _finite(p[1])]
        if pts:
            colors = [s.colors[s.points.index(p)] for p in pts] if s.colors else s.color
            bars = ax.bar([p[0] - 0.4 + width * (j + 0.5) for p in pts], [p[1] for p in pts], width * 0.92,
                          yerr=_errs(pts), color=colors, ecolor="#222222", capsize=3, label=s.name,
                          hatch=s.hatch or None, edgecolor="#333333" if s.hatch else None)
            for k, b in enumerate(bars):
                b.set_gid(f"series-bar-{k} {s.name}")
    ax.set_xticks(range(len(categories)), list(categories))
    if ref is not None:
        ax.axhline(ref, color="#444444", linestyle="--", linewidth=1)
    _y_from_zero(ax, series, ref)
    _finish(fig, ax, title, xlabel, ylabel)
    return fig


def _y_from_zero(ax, series: Sequence[Series], ref: float | None = None) -> None:
    """y from 0 to a little above the highest value, whisker end or reference line."""
    ys = [v for s in series for p in s.points for v in (p[1], p[3]) if _finite(v)]
    top = max(ys + ([ref] if ref is not None else []), default=1.0)
    ax.set_ylim(0, top * 1.08 if top > 0 else 1.0)


def _finish(fig: Figure, ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=11, fontweight="bold")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", color="#e5e5e5")
    ax.set_axisbelow(True)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=9)
    fig.tight_layout()


def svg(fig: Figure, title: str = "") -> str:
    """The figure as an SVG element to inline: no XML prolog, no date, stable ids, text kept as
    text (searchable, selectable), and a <title> for screen readers and tooltips."""
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "patchbench", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    if title:
        end = text.index(">") + 1
        text = text[:end] + f"<title>{html.escape(title)}</title>" + text[end:]
    return text


_RECORDERS: list[set] = []  # the sets `recording` collects written paths into (publish's manifest)


@contextlib.contextmanager
def recording() -> Iterator[set]:
    """The set of every file write_text / write_png write while inside (resolved paths)."""
    written: set = set()
    _RECORDERS.append(written)
    try:
        yield written
    finally:
        _RECORDERS.remove(written)


def _wrote(path: Path) -> None:
    for written in _RECORDERS:
        written.add(Path(path).resolve())


def write_text(path: Path, text: str) -> None:
    """Write a report file atomically (a reader never sees half a file)."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    _wrote(path)


def write_png(fig: Figure, path: Path) -> Path:
    """Write the figure as a PNG (atomically: a reader never sees half a file)."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    fig.savefig(tmp, format="png", dpi=110, metadata={"Software": None})
    os.replace(tmp, path)
    _wrote(path)
    return path


# -- the report's plots ---------------------------------------------------------------------------

def _point_label(kind: str, point: int) -> str:
    return f"{'bs' if kind == 'batch' else 'c'}={point}"


def interval_name(rows) -> str:
    """What the speedups' intervals are: "[95% CI]" where the fixed rule decided every row, "[interval]"
    where a sequential verdict decided one (its confidence sequence, or an 'equal' row's TOST bounds: not a
    95% CI; the notes give each rule), as compare's header says it."""
    return "[interval]" if any(getattr(r, "sequential", None) for r in rows) else "[95% CI]"


def speedup_ci(row) -> tuple[float, float]:
    """The interval of a CompareRow's speedup (the ratio's interval, inverted for lower-is-better)."""
    from toolkit.analysis.compare import speedup_interval

    return speedup_interval(row)


def verdict_color(verdict: str) -> str:
    """A speedup bar's colour: BETTER for a faster verdict, WORSE for slower, else UNDECIDED."""
    return {stats.FASTER: BETTER, stats.SLOWER: WORSE}.get(verdict, UNDECIDED)


def _pick(data, higher: bool) -> str | None:
    """The first metric of the report (in headline order) whose direction is `higher`."""
    for m in data.metrics:
        if metrics.higher_is_better(m) is higher:
            return m
    return None


def plots(data) -> list[Plot]:
    """Throughput and latency vs point (mean ± std), speedup bars (95% CI), efficiency bars."""
    color = {r.name: PALETTE[i % len(PALETTE)] for i, r in enumerate(data.recipes)}
    out: list[Plot] = []
    chosen = [(m, what) for m, what in ((_pick(data, True), "throughput"), (_pick(data, False), "latency")) if m]
    for metric, what in chosen:
        unit, kind = data.units.get(metric, ""), data.point_kinds.get(metric, "concurrency")
        series = []
        for r in data.recipes:
            pts = []
            for point in data.points(metric):
                vals = data.values.get((r.name, metric, point))
                if vals:
                    s = stats.summarize(vals)
                    pts.append((point, s.mean, s.mean - s.std, s.mean + s.std) if s.n > 1
                               else (point, s.mean, None, None))
            if pts:
                series.append(Series(r.name, color[r.name], tuple(pts)))
        title = f"{what}: {metric} vs {kind} (mean ± std)"
        out.append(Plot(what, title, line_plot(title, f"{kind} (log2 scale)",
                                               f"{metric} ({unit})" if unit else metric, series)))
    for metric, _ in chosen:
        kind = data.point_kinds.get(metric, "concurrency")
        pts_all = data.points(metric)
        series = []
        for j, r in enumerate(data.recipes[1:]):
            pts, colors = [], []
            for i, point in enumerate(pts_all):
                row = data.compare_row(r.name, metric, point)
                if row is not None:
                    lo, hi = speedup_ci(row)
                    pts.append((i, row.speedup, lo, hi))
                    colors.append(verdict_color(row.verdict))
            if pts:
                series.append(Series(r.name, color[r.name], tuple(pts), tuple(colors),
                                     HATCHES[j % len(HATCHES)] if len(data.recipes) > 2 else ""))
        if series:
            title = (f"speedup of {metric} vs {data.baseline} ({interval_name(data.rows).strip('[]')}; green faster, "
                     "red slower)")
            out.append(Plot(f"speedup-{metric}", title, bar_plot(
                title, kind, "speedup (> 1: better)", [_point_label(kind, p) for p in pts_all], series, ref=1.0)))
    effs = [r for r in data.recipes if r.efficiency and r.efficiency.judged and not r.efficiency.beyond]  # beyond: inputs wrong
    if effs:
        series = [Series(r.name, color[r.name], ((0, 100 * r.efficiency.fraction, None, None),)) for r in effs]
        title = "efficiency vs decode roofline at point 1 (decode-only tok/s: 1000/TPOT, 1000/ITL or decode_tok_s)"
        top = max(100 * r.efficiency.fraction for r in effs)
        out.append(Plot("efficiency", title, bar_plot(title, "recipes at batch/concurrency 1",
                                                      "% of theoretical tok/s", [""], series,
                                                      ref=100.0 if top > 50 else None)))
    return out
