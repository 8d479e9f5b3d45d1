"""A sweep's report: the Pareto figure (tokens/s per user vs tokens/s per GPU, one line per variant
over concurrency; variants on the front in colour, dominated ones grey, the front dashed) as PNG and
SVG, and `sweep.md` / `sweep.html` with the ranked table, the pruned variants and their reasons.

`write_sweep_report(doc, out)` writes them into `out` (atomically per file) and returns the paths.
"""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.figure import Figure

from toolkit.analysis import stats
from toolkit.report.plots import PALETTE, svg, write_png, write_text
from toolkit.report.tables import esc, html_table, md_table

GREY = "#b0b0b0"


def pareto_figure(points: list[dict], title: str, dominated: list[str]) -> Figure:
    """`points`: the JSON document's `pareto` entries; `dominated`: its variants beaten beyond the noise
    (grey)."""
    fig = Figure(figsize=(7.6, 4.6 + 0.16 * len({p["variant"] for p in points})))
    ax = fig.add_subplot()
    variants = list(dict.fromkeys(p["variant"] for p in points))
    colors = iter(PALETTE * 10)
    grey = set(dominated)
    for v in variants:
        pts = sorted((p for p in points if p["variant"] == v), key=lambda p: p["concurrency"])
        dominated = v in grey
        line = ax.plot([p["tok_s_per_gpu"] for p in pts], [p["tok_s_per_user"] for p in pts], marker="o",
                       color=GREY if dominated else next(colors), alpha=0.6 if dominated else 1.0,
                       label=v + (" (dominated)" if dominated else ""), zorder=1 if dominated else 2)
        line[0].set_gid(f"variant {'dominated' if dominated else 'front'} {v}")
        for p in pts:
            ax.annotate(f"c={p['concurrency']}", (p["tok_s_per_gpu"], p["tok_s_per_user"]), fontsize=6,
                        color="#555555", xytext=(3, 3), textcoords="offset points")
    front = sorted((p for p in points if p["on_front"]), key=lambda p: p["tok_s_per_gpu"])
    if front:
        ax.plot([p["tok_s_per_gpu"] for p in front], [p["tok_s_per_user"] for p in front], linestyle="--",
                color="black", linewidth=1.0, label="Pareto front", zorder=3)[0].set_gid("pareto-front")
    ax.set_title(title, fontsize=11, fontweight="bold")
    ax.set_xlabel("output tokens/s per GPU")
    ax.set_ylabel("output tokens/s per user")
    ax.grid(color="#e5e5e5")
    ax.set_axisbelow(True)
    if variants:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False, fontsize=7)
    fig.tight_layout()
    return fig


def _table(doc: dict) -> tuple[list[str], list[list[str]]]:
    sla = {v["variant"]: v["sla"] for v in doc["variants"] if v["sla"]}
    same = {v["variant"]: v.get("same_server_as") for v in doc["variants"]}
    kind = next(iter(sla.values()))["kind"] if sla else None
    head = ["#", "variant", {"ceiling": "max concurrency", "floor": "min concurrency", "both": "concurrencies",
                             None: "at"}[kind], *[f"{b} there" for b in doc["sla"]], f"{doc['metric']} [95% CI]",
            "vs default"]
    rows = []
    for i, r in enumerate(doc["ranked"], 1):
        ci = stats.format_mean_ci(r["mean"], *(math.nan if x is None else x for x in r["ci"]), r["n"])
        verdict = r["verdict"] + (f" ({r['change_pct']:+.1f}%)" if r["change_pct"] is not None else "")
        s = sla.get(r["variant"]) or sla.get(same.get(r["variant"])) or {}
        at = f"{s['passing'][0]}..{s['passing'][1]}" if kind == "both" and s.get("passing") else str(r["point"])
        rows.append([str(i), r["variant"], at, *[v["text"] for v in s.get("verdicts", [])], ci, verdict])
    return head, rows


def notes(doc: dict) -> list[str]:
    out = []
    for v in doc["variants"]:
        if v["pruned"]:
            out.append(f"pruned {v['variant']}: {v['pruned']}")
        elif v["failed"]:
            out.append(f"failed {v['variant']}: {v['failed']}")
        elif v.get("same_server_as"):
            out.append(f"same server as {v['same_server_as']}: {v['variant']} (sglang resolved its launch to that "
                       "configuration: /server_info, env and benchmark alike; measured once, its row shows "
                       f"{v['same_server_as']}'s numbers)")
        elif v["sla"] and v["sla"]["none"]:
            out.append(f"{v['variant']}: {v['sla']['none']}")
        for line in (v["sla"] or {}).get("breaks", []):
            out.append(f"{v['variant']}: {line}")
    if doc["dominated"]:
        out.append("dominated (every point beaten beyond the noise): " + ", ".join(doc["dominated"]))
        if doc.get("dominated_legend"):
            out.append(doc["dominated_legend"])
    gate = doc.get("gate") or {}
    out += [f"gate: {v}: {g['text']}" for v, g in gate.items()]
    out += list(dict.fromkeys(g["rule"] for g in gate.values() if g.get("rule")))
    out += [f"note: {line}" for line in doc.get("notes", [])]
    out += [f"server: {line}" for line in doc.get("server", [])]
    if doc.get("sla_legend"):
        out.append(doc["sla_legend"])
    return out


def design_notes(doc: dict) -> list[str]:
    """A sequential sweep's cost line and its rule (the cap among it): what `sweep` prints as it ends, for
    the written report (the console has them from toolkit.commands.run.print_sequential already)."""
    from toolkit.analysis.launch_cost import describe

    return ([describe(doc["cost"])] if doc.get("cost") else []) + \
        ([doc["sequential_legend"]] if doc.get("sequential_legend") else [])


def write_sweep_report(doc: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    title = f"sweep {doc['recipe']}" + (f" (SLA {', '.join(doc['sla'])})" if doc["sla"] else "")
    fig = pareto_figure(doc["pareto"], f"{doc['recipe']}: tokens/s per user vs per GPU", doc["dominated"])
    png = write_png(fig, out / "pareto.png")
    svg_text = svg(fig, "Pareto front")
    svg_path = out / "pareto.svg"
    write_text(svg_path, svg_text + "\n")
    head, rows = _table(doc)
    md = [f"# {title}", "", *md_table(head, rows)]
    lines = [*notes(doc), *design_notes(doc)]
    md += [""] + [f"- {line}" for line in lines] + ["", f"![Pareto front]({png.name})", ""]
    write_text(out / "sweep.md", "\n".join(md))
    page = [f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title></head><body>",
            f"<h1>{esc(title)}</h1>", html_table(head, rows, "border='1' cellspacing='0' cellpadding='4'")]
    page += ["<ul>"] + [f"<li>{esc(line)}</li>" for line in lines] + ["</ul>", svg_text, "</body></html>"]
    write_text(out / "sweep.html", "\n".join(page))
    return [out / "sweep.md", out / "sweep.html", png, svg_path]
