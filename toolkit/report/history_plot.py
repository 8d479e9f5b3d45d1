"""The tracked-history plot: the metric at each upstream point, in upstream order, with Otava's change
points marked (a dashed line before the first point after the change, red for worse, green for better,
labelled with the change and the commit its bisect named) and points without a value (stack did not
apply, build failed) as grey ticks at the bottom. PNG for PRs, SVG inline in an HTML page."""

from __future__ import annotations

import html
from pathlib import Path

from matplotlib.figure import Figure

from toolkit.report.plots import BETTER, WORSE, FIGSIZE, PALETTE, svg, write_png, write_text


def history_figure(title: str, ylabel: str, labels: list[str], values: list[float | None],
                   changes: list[dict]) -> Figure:
    """`values[i]` at `labels[i]` (None: no value); `changes`: {index, direction, change_pct, culprit}
    with `index` the first point after the change (in `labels`)."""
    fig = Figure(figsize=(max(FIGSIZE[0], 0.45 * len(labels) + 2), FIGSIZE[1]))
    ax = fig.add_subplot()
    xs = [i for i, v in enumerate(values) if v is not None]
    ys = [values[i] for i in xs]
    ax.plot(xs, ys, marker="o", color=PALETTE[0], linewidth=1.5, markersize=4, label="measured")
    missing = [i for i, v in enumerate(values) if v is None]
    if missing and ys:
        ax.plot(missing, [min(ys)] * len(missing), linestyle="none", marker="x", color="#999999",
                label="no value (stack did not apply / failed)")
    for c in changes:
        colour = WORSE if c["direction"] == "worse" else BETTER
        x = c["index"] - 0.5
        ax.axvline(x, color=colour, linestyle="--", linewidth=1.2)
        text = f"{c['change_pct']:+.1f}%"
        if c.get("culprit"):
            text += f"\n{c['culprit']}"
        ax.annotate(text, (x, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -4),
                    textcoords="offset points", va="top", fontsize=8, color=colour)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=45 if len(labels) > 6 else 0, ha="right" if len(labels) > 6 else "center",
                       fontsize=8)
    ax.set_title(title, fontsize=11, fontweight="bold")
    ax.set_xlabel("upstream point (oldest first)")
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", color="#e5e5e5")
    ax.set_axisbelow(True)
    if ys:
        ax.set_ylim(0, max(ys) * 1.15)
    ax.legend(loc="lower right", frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


def write_history_plot(fig: Figure, out_dir: Path, stem: str, title: str, lines: list[str] = ()) -> dict:
    """The plot as PNG and SVG under `out_dir`, and a self-contained HTML page (the SVG inline, then
    `lines`: the change points and their commits); their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png = write_png(fig, out_dir / f"{stem}.png")
    svg_path = out_dir / f"{stem}.svg"
    svg_text = svg(fig, title)
    write_text(svg_path, svg_text)
    page = out_dir / f"{stem}.html"
    items = "".join(f"<li>{html.escape(ln)}</li>" for ln in lines) or "<li>no change points</li>"
    write_text(page, f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
                    f"<body><h1>{html.escape(title)}</h1>{svg_text}<ul>{items}</ul></body></html>\n")
    return {"png": str(png), "svg": str(svg_path), "html": str(page)}
