"""The published site's sweep pages: a sweep's variants are stored as recipes named
`BASE[k=v,...]` (toolkit/recipe/matrix.py) beside `BASE`, the default configuration. Per sweep, from
the runs selection keeps for each variant (toolkit/analysis/selection.py): output tok/s at every
concurrency measured, as tokens/s per user and per GPU (toolkit/analysis/pareto.py), the Pareto
front and the dominated variants, drawn as `patchbench sweep` draws them (toolkit/report/sweep.py,
PNG and SVG). GPUs per variant as the sweep counts them (toolkit/analysis/launch_cost.gpus_of),
from the newest run's resolved recipe. Effects: reads the store, writes the page and its figure."""

from __future__ import annotations

import re
from pathlib import Path

from toolkit.analysis import pareto
from toolkit.analysis.selection import Criteria, reduce, select
from toolkit.analysis.launch_cost import gpus_of
from toolkit.errors import BadInput
from toolkit.results.records import bench_key
from toolkit.report.plots import svg, write_png, write_text
from toolkit.report.site_layout import Site, link, shell
from toolkit.report.sweep import pareto_figure
from toolkit.report.tables import esc, html_table

_VARIANT = re.compile(r"^(?P<base>.+)\[(?P<axes>[^\[\]]+)\]$")


def families(names: list[str]) -> dict[str, list[str]]:
    """BASE -> its stored variants `BASE[...]` (BASE first when it has runs too)."""
    out: dict[str, list[str]] = {}
    for n in names:
        m = _VARIANT.match(n)
        if m:
            out.setdefault(m.group("base"), []).append(n)
    return {base: ([base] if base in names else []) + sorted(vs) for base, vs in sorted(out.items())}


def _gpus(resolved: dict) -> int:
    return gpus_of((resolved.get("server") or {}).get("args") or {})


def points(store, variants: list[str], current: dict | None = None,
           criteria: Criteria = Criteria()) -> tuple[list[pareto.Point], list[str]]:
    """Each variant's (concurrency, output tok/s) as Pareto points, and notes for variants left out."""
    pts, notes = [], []
    for v in variants:
        found, why = {}, None
        try:
            found.update(_measured(store, select(store, [v], criteria, current=current)))
        except BadInput as exc:
            why = f"{v}: {exc.message}"
        # an SLA search's runs: one concurrency each (toolkit.analysis.sweep.at_concurrency), counted as
        # that search counts them, the variant as defined now measured at that one point
        now = (current or {}).get(v)
        for c in sorted(_single_points(store, v) - set(found)) if now else ():
            try:
                found.update(_measured(store, select(store, [v], criteria, current={v: at_point(now, c)})))
            except BadInput:
                continue
        if not found:
            notes.append(_same_server(store, v) or why or f"{v}: no output tok/s at any concurrency")
        for c, (values, gpus) in sorted(found.items()):
            pts.append(pareto.point(v, c, values, gpus))
    return pts, notes


def _same_server(store, v: str) -> str | None:
    """Why a variant has no points when a sweep found its launch to be another configuration's server
    (toolkit.run.same_server: its newest such verify run), else None."""
    for r in store.runs(recipe=[v], status=["ok"], newest_first=True):
        other = (r.extra or {}).get("same_server_as")
        if other:
            return (f"{v}: same server as {other} (sglang resolved its launch to that configuration: measured "
                    f"once, as {other})")
    return None


def _measured(store, sel) -> dict[int, tuple[list[float], int]]:
    """concurrency -> (output tok/s of each run, GPUs) over a selection's runs of its one recipe."""
    (v,) = sel.recipes
    ids = sel.run_ids(v)
    gpus = _gpus(sel.runs[v][-1].recipe_resolved or {})
    return {point: (list(obs.values), gpus)
            for (metric, point, kind), obs in reduce(store.samples(ids, metric="output_tok_s"), ids).items()
            if kind == "concurrency" and obs.values}


def _single_points(store, v: str) -> set[int]:
    """The concurrencies of the variant's runs that measured one concurrency (an SLA search's)."""
    out = set()
    for r in store.runs(recipe=[v], status=["ok"]):
        points = (r.bench_params or {}).get("points") or []
        if (r.bench_params or {}).get("driver") == "serving" and len(points) == 1:
            out.add(int(points[0]))
    return out


def at_point(definition: dict, c: int) -> dict:
    """A recipe definition (toolkit.run.identity.recipe_definition) with its benchmark at one concurrency."""
    params = {**(definition.get("bench_params") or {}), "points": [c]}
    return {**definition, "bench_params": params, "bench_key": bench_key(params.get("driver"), params)}


def write_page(store, site: Path, base: str, variants: list[str], current: dict | None,
               compare_pages: dict, criteria: Criteria = Criteria()) -> dict:
    """sweeps/<base>.html with the Pareto figure (PNG and SVG beside it); {"page", "front",
    "dominated", "points"}. `compare_pages`: variant -> its compare page (linked from its rows)."""
    page = Site.sweep(base)
    assets = site / Site.sweep_assets(base)
    assets.mkdir(parents=True, exist_ok=True)
    pts, notes = points(store, variants, current, criteria)
    front = {(p.variant, p.concurrency) for p in pareto.front(pts)}
    dominated = pareto.dominated_variants(pts)
    doc_points = [{"variant": p.variant, "concurrency": p.concurrency, "tok_s_per_user": p.per_user,
                   "tok_s_per_gpu": p.per_gpu, "on_front": (p.variant, p.concurrency) in front} for p in pts]
    parts = [f"<p>{len(variants)} configuration(s) stored; the default configuration is {esc(base)}"
             + ("" if base in variants else " (no runs of its own)") + ".</p>"]
    if pts:
        fig = pareto_figure(doc_points, f"{base}: tokens/s per user vs per GPU", dominated)
        png = write_png(fig, assets / "pareto.png")
        svg_text = svg(fig, "Pareto front")
        write_text(assets / "pareto.svg", svg_text + "\n")
        parts += [f'<div class="plots">{svg_text}</div>',
                  f"<p>{link(page, f'{Site.sweep_assets(base)}/{png.name}', 'PNG')} · "
                  f"{link(page, f'{Site.sweep_assets(base)}/pareto.svg', 'SVG')}</p>"]
    head = ["variant", "concurrency", "output tok/s", "tok/s per user", "tok/s per GPU", "on the front"]
    body = [[p.variant, str(p.concurrency), f"{p.per_user * max(p.concurrency, 1):.4g}",
             f"{p.per_user:.4g}", f"{p.per_gpu:.4g}", "yes" if (p.variant, p.concurrency) in front else "no"]
            for p in sorted(pts, key=lambda p: (p.variant, p.concurrency))]
    parts.append(html_table(head, body))
    if dominated:
        parts.append("<p>Dominated (every point beaten beyond the noise, grey in the figure): "
                     + esc(", ".join(dominated)) + "</p>")
    links = [f"<li>{link(page, Site.recipe(v), v)}"
             + (f" · {link(page, compare_pages[v], 'compared with ' + base)}" if v in compare_pages else "")
             + "</li>" for v in variants]
    parts.append("<h2>Configurations</h2><ul>" + "".join(links) + "</ul>")
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    parts.append('<p class="note">Per user = output tok/s / concurrency; per GPU = output tok/s / GPUs serving '
                 "the variant. A point is on the front when no other point's means are at least as good on both and "
                 f"better on one. {esc(pareto.legend())}.</p>")
    (site / page).parent.mkdir(parents=True, exist_ok=True)
    write_text(site / page, shell(page, f"sweep {base}: Pareto front", "\n".join(parts)))
    return {"page": page, "front": sorted(front), "dominated": dominated, "points": len(pts)}
