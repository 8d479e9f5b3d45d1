"""`patchbench publish`: a static site of everything the store holds, like `asv publish`: plain HTML
files with relative links (no script, no external resource), servable by any web server or opened
from a shared folder.

    index.html                  every recipe: its runs, its newest verdict against the recipe it is
                                compared to (`compare_to` of its newest run), its history and sweep
    recipes/<recipe>.html       its results (the report of the recipe alone, toolkit/report/document.py),
                                its runs, its kernel tables (toolkit/report/kernels.py), links
    compare/<base>--<var>.html  the report of the pair: speedups and verdicts, the answers' and the
                                accuracy gate's verdicts, plots, what else differed
    history/<recipe>.html       tracked series with change points (toolkit/report/site_history.py)
    sweeps/<base>.html          a sweep's Pareto front (toolkit/report/site_sweep.py)

Runs are chosen as `compare` and `report` choose them (toolkit/analysis/selection.py, the default
criteria; `current`: the recipes' definitions from their files where readable). A page that cannot be
computed (a pair whose benchmarks differ, a recipe with no usable run) says why instead. Effects:
reads the store and HOME (kernels, history verdicts), writes under the output directory (each file
atomically; the files of an earlier publish that this one does not write are removed, as its manifest
`.patchbench-site` names them, where unchanged since: toolkit/report/site_manifest.py; nothing else is).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from toolkit.analysis.selection import Criteria
from toolkit.errors import BadInput
from toolkit.report import site_history, site_manifest, site_sweep
from toolkit.report.document import collect, render_html
from toolkit.report.plots import plots, recording, write_text
from toolkit.report.quality_section import combined, verdict_at
from toolkit.report.site_layout import Site, link, nav, shell
from toolkit.report.tables import esc, html_table


@dataclass
class Published:
    root: Path
    pages: list = field(default_factory=list)  # relative paths of the HTML pages written
    notes: list = field(default_factory=list)  # pages that say why they have no results; untrusted files

    def artifact_notes(self, page: str, data) -> None:
        """The page's lines on kept files missing or altered (toolkit/results/artifacts.vouch), once each."""
        for line in (data.notes if data else ()):
            if line.startswith("artifact: ") and not any(n.endswith(line) for n in self.notes):
                self.notes.append(f"{page}: {line}")


def _point_label(kind: str, point: int) -> str:
    return f"{'bs' if kind == 'batch' else 'c'}={point}"


def verdict_summary(data) -> str:
    """The index's cell for a pair: the first headline metric's verdict at each point (with the
    answers' verdict where it overrides), then the accuracy gate's."""
    if not data.metrics:
        return "-"
    metric = data.metrics[0]
    variant = data.recipes[-1].name
    cells = []
    for r in data.rows:
        if r.metric == metric and r.recipe == variant:
            verdict = combined(r.verdict, verdict_at(data.quality, variant, r.point))
            cells.append(f"{_point_label(r.point_kind, r.point)} {verdict} ({r.speedup:.2f}x)")
    text = f"{metric}: " + ", ".join(cells) if cells else f"{metric}: not compared"
    gate = (data.gate or {}).get(variant)
    return text + (f"; gate: {gate['text']}" if gate else "")


def _runs_table(runs) -> str:
    head = ["run", "group", "repeat", "status", "kind", "started", "GPU", "env", "error"]
    body = [[r.run_id[:8], r.group_id or "", str(r.repeat), r.display_status(), r.kind, r.started_at or "",
             r.gpu_key, (r.env_key or "")[:10], (r.error or "")[:160]] for r in runs]
    return html_table(head, body)


def _kernels(home: Path, names: list[str], site: Path, assets: str) -> str:
    """The kernel tables of `names` (the first is the baseline) as HTML, their PNGs under `assets`."""
    from toolkit.kernels import records
    from toolkit.report.kernels import kernel_section

    if not records.latest(home, names[0]):
        return ""
    (site / assets).mkdir(parents=True, exist_ok=True)
    return kernel_section(home, names, site / assets).html


def _report_page(store, site: Path, page: str, names: list[str], title: str, extra: str,
                 current: dict, criteria: Criteria) -> tuple[object | None, str | None]:
    """The report of `names` as a site page (toolkit/report/document.py); (its data, None) or
    (None, why not) with a page saying why."""
    try:
        data = collect(store, names, title=title, criteria=criteria, current=current)
    except BadInput as exc:
        why = exc.message + (f" ({exc.hint})" if getattr(exc, "hint", None) else "")
        write_text(site / page, shell(page, title, f"<p><b>No results to show:</b> {esc(why)}</p>\n{extra}"))
        return None, why
    write_text(site / page, render_html(data, plots(data), nav=nav(page), extra=extra, by="patchbench publish"))
    return data, None


def publish(store, out: Path, *, home: Path, current: dict | None = None, stacks: dict | None = None,
            console=None, imported: bool = False) -> Published:
    """Write the site into `out`. BadInput for an empty store or a directory that cannot be written.
    `imported`: imported runs count too (a store filled from another's export), as `compare --imported`."""
    criteria = Criteria(imported=imported)
    names = store.recipe_names()
    if not names:
        raise BadInput("nothing to publish: the store has no runs", hint="patchbench run RECIPE first")
    out = Path(out)
    try:
        for d in ("", "recipes", "compare", "history", "sweeps"):
            (out / d).mkdir(parents=True, exist_ok=True)
        before = site_manifest.save(out, site_manifest.read(out))  # the last publish's, until this one ends
    except OSError as exc:
        raise BadInput(f"cannot write the site to {out}: {exc.strerror or exc}") from None
    with recording() as written:
        pub = _publish(store, out, names, home=home, current=current, stacks=stacks, console=console,
                       criteria=criteria, imported=imported)
    removed = site_manifest.remove_stale(out, before, site_manifest.save(out, site_manifest.files_of(out, written)))
    if removed:
        pub.notes.append(f"removed {len(removed)} file(s) an earlier publish wrote for what the store no longer "
                         f"has: {', '.join(removed[:6])}{', ...' if len(removed) > 6 else ''}")
    return pub


def _publish(store, out: Path, names: list, *, home: Path, current, stacks, console, criteria,
             imported: bool) -> Published:
    current, stacks = current or {}, stacks or {}
    pub = Published(out)
    runs = {n: store.runs(recipe=n) for n in names}
    pairs = []
    for n in names:
        base = (runs[n][-1].recipe_resolved or {}).get("compare_to") if runs[n] else None
        if base and base != n and base in runs:
            pairs.append((base, n))
    base_of = dict((v, b) for b, v in pairs)
    fams = site_sweep.families(names)
    family_of = {v: base for base, vs in fams.items() for v in vs}

    verdicts, compare_pages = {}, {}
    for base, var in pairs:
        page = Site.compare(base, var)
        compare_pages[var] = page
        extra = _kernels(home, [base, var], out, Site.compare_assets(base, var))
        extra += f"<p>{link(page, Site.recipe(base), base)} · {link(page, Site.recipe(var), var)}</p>"
        data, why = _report_page(store, out, page, [base, var], f"{var} vs {base}", extra, current, criteria)
        verdicts[var] = verdict_summary(data) if data else f"not compared: {why}"
        pub.pages.append(page)
        pub.artifact_notes(page, data)
        if why:
            pub.notes.append(f"{page}: {why}")

    history = {}  # tracked recipe -> the index's summary
    tracked = site_history.tracked_recipes(r for rs in runs.values() for r in rs)
    series = [s for n in tracked for s in site_history.tracked_series(store, n, now=current.get(n),
                                                                      stack=stacks.get(n), imported=imported)]
    if series:
        site_history.detect(series, home, console)
    point_of = {n: t for n in names for t in site_history.tracked_recipes(runs[n])}
    for n in tracked:
        mine = [s for s in series if s.recipe == n]
        if mine:
            pages = {x: Site.recipe(x) for x in names if x == n or point_of.get(x) == n}
            pub.pages.append(site_history.write_page(out, n, mine, pages))
            pub.pages += sorted(str(p.relative_to(out)) for p in (out / Site.history_assets(n)).glob("*.html"))  # each plot alone
            history[n] = site_history.summary(mine)
    history_of = {n: t for n, t in point_of.items() if t in history and t != n}

    sweeps = {}
    for base, variants in fams.items():
        info = site_sweep.write_page(store, out, base, variants, current, compare_pages, criteria)
        pub.pages.append(info["page"])
        sweeps[base] = info

    for n in names:
        page = Site.recipe(n)
        links = [link(page, compare_pages[n], f"compared with {base_of[n]}")] if n in compare_pages else []
        links += [link(page, compare_pages[v], f"{v} compared with it") for b, v in pairs if b == n]
        if n in history:
            links.append(link(page, Site.history(n), "tracked history"))
        elif n in history_of:
            links.append(link(page, Site.history(history_of[n]), f"tracked history of {history_of[n]}"))
        if n in family_of:
            links.append(link(page, Site.sweep(family_of[n]), f"sweep {family_of[n]}"))
        extra = ("<h2>Pages</h2><ul>" + "".join(f"<li>{x}</li>" for x in links) + "</ul>" if links else "")
        extra += _kernels(home, [n], out, Site.recipe_assets(n))
        extra += f"<h2>Runs ({len(runs[n])})</h2>" + _runs_table(list(reversed(runs[n]))[:200])
        data, why = _report_page(store, out, page, [n], n, extra, current, criteria)
        pub.pages.append(page)
        pub.artifact_notes(page, data)
        if why:
            pub.notes.append(f"{page}: {why}")

    write_text(out / "index.html", _index(names, runs, pairs, verdicts, compare_pages, history, history_of,
                                          sweeps, fams, store.counts()))
    pub.pages.insert(0, "index.html")
    return pub


def _index(names, runs, pairs, verdicts, compare_pages, history, history_of, sweeps, fams, counts) -> str:
    page = "index.html"
    base_of = {v: b for b, v in pairs}
    head = ["recipe", "runs (ok / all)", "newest run", "compared with", "newest verdict", "history"]
    rows = []
    for n in names:
        rs = runs[n]
        ok = sum(1 for r in rs if r.status == "ok")
        newest = max((r.started_at or "" for r in rs), default="")
        rows.append([link(page, Site.recipe(n), n), f"{ok} / {len(rs)}", esc(newest),
                     link(page, compare_pages[n], base_of[n]) if n in compare_pages else "-",
                     esc(verdicts.get(n, "-")),
                     link(page, Site.history(n), history[n]) if n in history else
                     link(page, Site.history(history_of[n]), f"point of {history_of[n]}") if n in history_of else "-"])
    table = ("<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr></thead><tbody>"
             + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
             + "</tbody></table>")
    parts = [f'<p class="note">generated by patchbench publish, '
             f"{esc(datetime.now(timezone.utc).isoformat(timespec='seconds'))}; "
             + esc(", ".join(f"{v} {k}" for k, v in sorted(counts.items()))) + " runs</p>",
             "<h2>Recipes</h2>", table]
    if history:
        parts.append("<h2>Tracked histories</h2><ul>" + "".join(
            f"<li>{link(page, Site.history(n), n)}: {esc(text)}</li>" for n, text in sorted(history.items()))
            + "</ul>")
    if fams:
        parts.append("<h2>Sweeps</h2><ul>")
        for base, info in sweeps.items():
            dom = f"; dominated: {', '.join(info['dominated'])}" if info["dominated"] else ""
            parts.append(f"<li>{link(page, info['page'], base)}: {len(fams[base])} configuration(s), "
                         f"{info['points']} point(s){html.escape(dom)}</li>")
        parts.append("</ul>")
    parts.append('<p class="note">Verdicts as `patchbench compare` gives them: runs chosen by the one selection '
                 "rule, the speedup of the first headline metric with its verdict at each point.</p>")
    return shell(page, "patchbench results", "\n".join(parts))
