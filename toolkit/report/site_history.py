"""The published site's history pages: for each recipe `patchbench track` measured, per tracked source
and headline metric (the first throughput and the first latency measured, at the benchmark's first
point) the series in upstream order (toolkit/history/series.py), its change points by Apache Otava
(all series of the site in one start of Otava's env, toolkit/history/otava.py) with the bisect
verdicts stored for them (toolkit/history/autobisect.py), and the plot with the change points marked
(toolkit/report/history_plot.py: PNG, SVG and its own page beside the site's).

Effects: reads the store and HOME/history, may create Otava's env once (as `patchbench history`
does), writes the plots and pages. Where Otava cannot run, the page says so and still plots."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from toolkit.analysis import stats
from toolkit.errors import BadInput, PatchbenchError
from toolkit.history import changes
from toolkit.history.autobisect import load_state, state_path
from toolkit.history.otava import MIN_POINTS, detect_many
from toolkit.history.series import History, load_history
from toolkit.report.history_plot import history_figure, write_history_plot
from toolkit.report.site_layout import Site, link, rel, shell, slug
from toolkit.report.tables import esc, html_table
from toolkit.results import metrics
from toolkit.results.metrics import MetricSpec


@dataclass
class Series:
    recipe: str
    source: str
    spec: MetricSpec
    hist: History
    rows: list = field(default_factory=list)  # toolkit.history.changes.rows
    why_none: str | None = None  # why no change points were computed


def _metrics_of(store, run_ids: list[str]) -> list[str]:
    have = set().union(*store.measured_metrics(run_ids).values()) if run_ids else set()
    up = next((m for m in metrics.default_names() if m in have and metrics.higher_is_better(m)), None)
    down = next((m for m in metrics.default_names() if m in have and metrics.higher_is_better(m) is False), None)
    return [m for m in (up, down) if m]


def tracked_recipes(runs) -> list[str]:
    """The recipes `patchbench track` measured (`extra.track.recipe`: its runs are stored under
    per-point labels such as `demo/update@0.1.2`)."""
    return sorted({(r.extra.get("track") or {}).get("recipe") for r in runs} - {None})


def tracked_series(store, recipe: str, *, now: dict | None = None, stack: str | None = None,
                   imported: bool = False) -> list[Series]:
    """The recipe's tracked series (none when `track` never measured it). `now`: its current
    definition, `stack`: its patch stack's digest (both from its file, when readable)."""
    runs = store.tracked_runs(recipe)
    sources = sorted({(r.extra.get("track") or {}).get("source") for r in runs} - {None})
    out = []
    for source in sources:
        ok = [r.run_id for r in runs if r.status == "ok" and (r.extra.get("track") or {}).get("source") == source]
        for m in _metrics_of(store, ok):
            try:
                hist = load_history(store, recipe, source, MetricSpec(m, None), stack=stack, now=now, imported=imported)
            except BadInput:
                continue
            out.append(Series(recipe, source, MetricSpec(m, hist.point), hist))
    return out


def detect(series: list[Series], home: Path, console=None) -> None:
    """Fill each series' change points (one start of Otava's env for all), or the reason there are none."""
    long = []
    for s in series:
        if len(s.hist.measured) < MIN_POINTS:
            s.why_none = (f"not enough history: {len(s.hist.measured)} measured point(s); Otava's E-Divisive "
                          f"needs at least {MIN_POINTS}")
        else:
            long.append(s)
    if not long:
        return
    try:
        found = detect_many([[e.value for e in s.hist.measured] for s in long], home, console=console)
    except PatchbenchError as exc:
        for s in long:
            s.why_none = f"change points not computed: {exc}"
        return
    for s, d in zip(long, found):
        verdicts = load_state(state_path(home, s.recipe, s.source))["bisects"]
        s.rows = changes.rows(s.hist, d.change_points, s.spec, verdicts)


def _entries_table(hist: History, spec: MetricSpec) -> str:
    head = ["point", "date", f"{spec.metric} ({spec.info.unit})", "runs", "status"]
    body = [[e.label, e.date or "", stats.format_value(e.value) if e.value is not None else "-",
             str(len(e.run_ids)), e.status if not e.reason else f"{e.status}: {e.reason[:120]}"]
            for e in hist.entries]
    return html_table(head, body)


def write_page(site: Path, recipe: str, series: list[Series], pages: dict[str, str]) -> str:
    """history/<recipe>.html and its plots; the page's path from the site's root. `pages`: stored
    name -> its recipe page, linked (the recipe's own and its points' runs, `demo/update@0.1.2`)."""
    page = Site.history(recipe)
    assets = site / Site.history_assets(recipe)
    parts = [f"<p>{' · '.join(link(page, p, n) for n, p in pages.items())}</p>"] if pages else []
    for s in series:
        title = f"{recipe}: {s.spec} across {s.source} history"
        fig = history_figure(title, f"{s.spec.metric} ({s.spec.info.unit})", [e.label for e in s.hist.entries],
                             [e.value for e in s.hist.entries], changes.marks(s.hist, s.rows))
        lines = [changes.line(r) for r in s.rows] or [s.why_none or "no change points (Otava's E-Divisive, and no stretch)"]
        lines += s.hist.older_lines()
        stem = slug(f"{s.source}-{s.spec.metric}@{s.spec.point}")
        paths = {k: Path(v) for k, v in write_history_plot(fig, assets, stem, title, lines).items()}
        where = {k: f"{Site.history_assets(recipe)}/{v.name}" for k, v in paths.items()}
        parts += [f"<h2>{esc(s.source)}: {esc(str(s.spec))}</h2>",
                  f'<img class="plot" src="{esc(rel(page, where["svg"]))}" alt="{esc(title)}">',
                  f"<p>{link(page, where['png'], 'PNG')} · {link(page, where['html'], 'the plot alone')}</p>",
                  "<ul>" + "".join(f"<li>{esc(x)}</li>" for x in lines) + "</ul>",
                  _entries_table(s.hist, s.spec)]
        if s.hist.other_gpus:
            parts.append(f'<p class="note">{s.hist.other_gpus} ok run(s) on another GPU kind left out '
                         f"(this series: {esc(s.hist.gpu_key)})</p>")
    (site / page).parent.mkdir(parents=True, exist_ok=True)
    from toolkit.report.plots import write_text

    write_text(site / page, shell(page, f"{recipe}: tracked history", "\n".join(parts)))
    return page


def summary(series: list[Series]) -> str:
    """The index's line: the newest change point of each series, or how many points were measured."""
    out = []
    for s in series:
        if s.rows:
            r = s.rows[-1]
            out.append(f"{s.spec.metric}: {r['change_pct']:+.1f}% ({r['direction']}) at {r['after']}")
        else:
            out.append(f"{s.spec.metric}: {len(s.hist.measured)} point(s), no change point")
    return "; ".join(out)
