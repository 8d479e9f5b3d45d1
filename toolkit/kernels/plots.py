"""The kernel-table plot: TFLOPS and roofline efficiency against M (tokens for the MoE op), one line
per (recipe, backend, shape family); shapes whose check failed are drawn as red crosses. A matplotlib
Figure (no pyplot, no display); the report writes it as PNG and inline SVG."""

from __future__ import annotations

from matplotlib.figure import Figure

from toolkit.kernels.registry import OPS
from toolkit.kernels.table import rows


def _x(op_name: str, dims: dict) -> int:
    op = OPS.get(op_name)
    return dims["m"] if (op is None or op.kind == "gemm") else dims["tokens"]


def tflops_efficiency_plot(records: list[dict], title: str) -> Figure:
    fig = Figure(figsize=(10, 4), layout="constrained")
    ax_t, ax_e = fig.subplots(1, 2)
    xlabel = "M (tokens per expert)"
    for rec in records:
        by_family: dict[tuple, list] = {}
        for r in rows(rec):
            if r.status != "ok":
                continue
            fam = (r.label, tuple((k, v) for k, v in r.dims.items() if k not in ("m", "tokens")))
            by_family.setdefault(fam, []).append(r)
            if OPS.get(rec["op"]) and OPS[rec["op"]].kind != "gemm":
                xlabel = "tokens"
        for (label, const), rs in sorted(by_family.items()):
            rs.sort(key=lambda r: _x(rec["op"], r.dims))
            xs = [_x(rec["op"], r.dims) for r in rs]
            name = f"{rec['recipe']} [{rec.get('backend')}] {label} " + " ".join(f"{k}={v}" for k, v in const)
            line = ax_t.plot(xs, [r.tflops for r in rs], marker="o", label=name)[0]
            if any(r.efficiency is not None for r in rs):
                ax_e.plot(xs, [100 * r.efficiency if r.efficiency is not None else float("nan") for r in rs],
                          marker="o", color=line.get_color(), label=name)
            bad = [(x, r) for x, r in zip(xs, rs) if r.verdict != "ok"]
            if bad:
                ax_t.scatter([x for x, _ in bad], [r.tflops for _, r in bad], marker="x", s=80, color="red", zorder=5)
    for ax, ylabel in ((ax_t, "TFLOPS"), (ax_e, "efficiency vs roofline floor (%)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    ax_t.set_title(title, fontsize=10, loc="left")
    handles, labels = ax_t.get_legend_handles_labels()
    if handles:
        ax_e.legend(handles, labels, fontsize=7, loc="best")
    return fig
