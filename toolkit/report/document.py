"""Reports of stored results: a Markdown table for a pull request and one self-contained HTML page.

`collect(store, recipes)` gathers what a report shows (provenance per recipe, per-run values per
metric and point, comparisons against the first recipe, efficiency against the roofline, the runs
used) into a `ReportData`, choosing runs exactly as `compare` does (`toolkit.analysis.selection`);
`render_markdown(data, images)` and `render_html(data)` turn it into text. The HTML page has no
external resources: styles are inline, the plots inline SVG (`toolkit.report.plots`, matplotlib);
the Markdown links the same plots as PNG files written beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import PurePath
from typing import Any, Sequence

from toolkit.results import metrics

from toolkit.analysis import stats
from toolkit.analysis.compare import (compare_selection, diff_provenance, fixed_rule_used, interval_legends,
                                      sequential_legends)
from toolkit.analysis.efficiency import Efficiency, efficiency
from toolkit.analysis.selection import Criteria, reduce, select
from toolkit.analysis.where import where_by_recipe
from toolkit.errors import BadInput
from toolkit.analysis.provenance import run_env_differences
from toolkit.report import quality_section
from toolkit.report.plots import Plot, interval_name, plots, speedup_ci, svg
from toolkit.report.tables import esc as _esc, html_table, md_table

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
    selection: tuple[str, ...] = ()  # the runs, groups and dates used, one line per recipe
    where: dict = field(default_factory=dict)  # (recipe, metric) -> where it was measured (evidence metrics)
    legend: str = ""  # the verdict rule with the settings in force
    quality: dict = field(default_factory=dict)  # variant -> answers' verdicts (toolkit.report.quality_section)
    gate: dict = field(default_factory=dict)  # variant -> the accuracy gate's verdict (quality_section.gates)
    cost: tuple[str, ...] = ()  # GPU minutes per recipe and per verdict, and the fixed design's (verdict_cost)
    cost_title: str = "Cost (GPU minutes)"  # verdict_cost.title: no GPU minutes where no run held a GPU

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


def collect(store: Any, recipes: Sequence[str], metrics_: Sequence[str] | None = None, *,
            title: str | None = None, criteria: Criteria = Criteria(),
            min_effect: float | None = None, current: dict | None = None) -> ReportData:
    """Everything a report shows for `recipes` (the first is the baseline) from `store`.

    Runs: the ones `toolkit.analysis.selection` chooses under `criteria`, the same as `compare`'s;
    `metrics_` are `NAME[@POINT]` specs (default: the registry's headline metrics that were
    measured). Raises BadInput for an unknown metric or when a recipe has no usable run."""
    explicit, min_effect = min_effect, stats.DEFAULT_MIN_EFFECT if min_effect is None else min_effect
    names = list(dict.fromkeys(recipes))
    if not names:
        raise BadInput("report needs at least one recipe")
    specs = metrics.parse_specs(list(metrics_ or []))
    sel = select(store, names, criteria, current=current)
    notes: list[str] = list(sel.notes)
    values: dict[tuple[str, str, int], tuple[float, ...]] = {}
    units: dict[str, str] = {}
    kinds: dict[str, str] = {}
    summaries = []
    measured: dict[str, set] = {}  # metric -> points, whatever was asked (for the error naming them)
    for n in names:
        runs = sel.runs[n]
        newest = runs[-1]
        samples = store.samples([r.run_id for r in runs])
        for (metric, point, kind), obs in reduce(samples, sel.run_ids(n)).items():
            measured.setdefault(metric, set()).add(point)
            if specs and not any(s.metric == metric and s.point in (None, point) for s in specs):
                continue
            values[(n, metric, point)] = obs.values
            units.setdefault(metric, obs.unit)
            kinds.setdefault(metric, kind)
        undeclared = sorted({p for r in runs for p, v in ((r.extra or {}).get("evidence") or {}).items()
                             if v == "undeclared"})
        if undeclared:
            notes.append(f"{n}: no activation evidence declared for {', '.join(undeclared)} "
                         "(nothing shows that these patches ran)")
        summaries.append(RecipeSummary(
            name=n, run_ids=tuple(r.run_id for r in runs),
            verified=all(r.config_verified is True for r in runs),
            sglang_version=newest.sglang_version, flashinfer_version=newest.flashinfer_version,
            tree_hashes=dict(newest.tree_hashes or {}),
            patches=_patch_names((newest.extra or {}).get("patches")),
            gpu=newest.gpu_key, env_key=newest.env_key, efficiency=efficiency(newest, samples)))

    from toolkit.results.box_flags import box_lines
    from toolkit.run.bench.server_account import run_lines

    used, label = [r for n in names for r in sel.runs[n]], {r.run_id: n for n in names for r in sel.runs[n]}
    notes += [f"box: {line}" for line in box_lines(used, label)]
    from toolkit.results import capacity

    notes += [f"server: {line}" for line in capacity.lines(used, label) + run_lines(used, label)]
    from toolkit.analysis.tactics import lines as tactic_lines

    notes += [f"tactics: {line}" for line in tactic_lines({n: sel.runs[n] for n in names})]
    stored = {m for (_, m, _) in values}
    if specs:
        chosen = list(dict.fromkeys(s.metric for s in specs))
        absent = [m for m in chosen if m not in stored]
        if len(absent) == len(chosen):
            asked = [str(s) for s in specs]
            at = [f"{m} at {', '.join(map(str, sorted(measured[m])))}" for m in chosen if m in measured]
            raise BadInput(f"{', '.join(asked)}: not measured for {', '.join(names)}",
                           hint=(f"measured: {'; '.join(at)}" if at else
                                 f"measured: {', '.join(sorted(measured)) or 'no metric at all'}"))
        if absent:
            notes.append(f"not measured: {', '.join(absent)}")
        chosen = [m for m in chosen if m in stored]
    else:
        chosen = [m for m in metrics.default_names() if m in stored] or sorted(stored)
    values = {k: v for k, v in values.items() if k[1] in chosen}

    rows: list = []
    differences: dict[str, list[str]] = {}
    if len(names) >= 2:
        from toolkit.analysis.sequential_design import for_ref as sequential_design

        design = sequential_design(names[0], explicit)
        rows = compare_selection(store, sel, metrics=specs or chosen, min_effect=min_effect, sequential=design,
                                 zone=explicit)
        notes.extend(sequential_legends(rows, design) + interval_legends(rows))
        from toolkit.analysis.compare import spread_flags_of

        noisy = spread_flags_of(store, rows)
        if noisy:
            from toolkit.analysis import spread_flag

            notes.extend([*(f"noisy: {f['metric']} @ {f['point']}: {f['text']}" for f in noisy), spread_flag.legend()])
        for n in names[1:]:
            base, var = sel.newest(names[0]), sel.newest(n)
            differences[n] = diff_provenance(base, var) + run_env_differences(base, var)
    cost_title, cost = cost_section(store, sel, rows)
    return ReportData(
        title=title or ("patchbench: " + " vs ".join(names)),
        recipes=tuple(summaries), metrics=tuple(chosen),
        units={m: units.get(m, "") for m in chosen}, point_kinds={m: kinds.get(m, "concurrency") for m in chosen},
        values=values, rows=tuple(rows), differences=differences, notes=tuple(notes),
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        selection=tuple(sel.describe()),
        legend=stats.verdict_legend(min_effect=min_effect) if fixed_rule_used(rows) else "",  # only a rule that judged
        where=where_by_recipe(sel.runs),
        quality=quality_section.collect(sel) if len(names) >= 2 else {},
        gate=quality_section.gates(sel) if len(names) >= 2 else {}, cost=tuple(cost),
        cost_title=cost_title)


def cost_section(store, sel, rows) -> tuple[str, list[str]]:
    """(the heading, the lines) of what every launch of the recipes cost, said apart (used, reused, left out,
    failed, interrupted), and per verdict against the fixed design (toolkit.analysis.verdict_cost: the lines
    compare and results print; the heading titled by the same launches)."""
    from toolkit.analysis import verdict_cost

    heading, lines = verdict_cost.section(store, sel, rows)
    return heading, [*lines, verdict_cost.LEGEND]

# -- table contents shared by both renderers --------------------------------------------------------

def reading_note(data: ReportData) -> str:
    """How to read the results table: the speedup's direction, and the interval and rule of its rows
    (the fixed rule's legend only when a row took it; a sequential design's is among the notes)."""
    if len(data.recipes) < 2:  # one recipe: nothing compared, no verdict and no rule to read
        return "mean ± std over the runs used, one value per run."
    head = "Speedup > 1 means better than the baseline (higher throughput or lower latency); "
    if any(getattr(r, "sequential", None) for r in data.rows):
        head += ("a row marked (sequential) shows its sequential verdict's confidence interval (its rule is among "
                 "the notes)" + ("; any other row, the 95% confidence interval of the ratio of means. "
                                 if data.legend else ""))
    else:
        head += "the interval is the 95% confidence interval of the ratio of means. "
    return head + (data.legend + "." if data.legend else ".")


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


def _speedup_text(row) -> str:
    return stats.format_speedup(row.speedup, *speedup_ci(row))


def _judged(row, stored: int) -> tuple[float, float, str]:
    """A variant's mean, std and n as its verdict judged them: a sequential look uses the first n launches
    of each side, which may be fewer than the runs stored ("2 of 3")."""
    n = f"{row.n_variant}" + (f" of {stored}" if row.n_variant != stored else "")
    return row.variant_mean, row.variant_std, n


def _baseline_look(row, stored: int, baseline: str) -> str:
    """Where the verdict judged fewer of the baseline's runs than its line shows (a sequential look's first n,
    or one sweep's): the baseline as judged."""
    if row.n_base == stored:
        return ""
    judged = stats.format_mean_std(row.base_mean, row.base_std, row.unit).replace(" +- ", " ± ")
    return f" (vs {baseline} over {row.n_base} of its {stored} runs: {judged})"


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
    head = ["metric", "point", "recipe", "mean ± std", "n", f"speedup vs {data.baseline} {interval_name(data.rows)}",
            "verdict"]
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
                row = None if r.name == data.baseline else data.compare_row(r.name, metric, point)
                mean, std, n = (s.mean, s.std, str(s.n)) if row is None else _judged(row, s.n)
                cell = stats.format_mean_std(mean, std, unit).replace(" +- ", " ± ")
                if (r.name, metric) in data.where:
                    cell += f" ({data.where[r.name, metric]})"
                if r.name == data.baseline:
                    speed, verdict = "baseline", ""
                else:
                    base_n = len(data.values.get((data.baseline, metric, point)) or ())
                    speed, verdict = (_speedup_text(row) + _baseline_look(row, base_n, data.baseline),
                                      row.verdict) if row else ("-", "")
                    if row and row.sequential:  # decided by the sequential rule (its legend is among the notes)
                        verdict += " (sequential)"
                    verdict = quality_section.combined(verdict, quality_section.verdict_at(data.quality, r.name, point))
                rows.append([f"{metric} ({unit})" if first and unit else (metric if first else ""),
                             _point_label(kind, point) if first else "", r.name, cell, n,
                             speed, verdict])
                first = False
    if len(data.recipes) < 2:  # one recipe: no speedup, no verdict
        return head[:5], [row[:5] for row in rows]
    return head, rows


# -- Markdown -----------------------------------------------------------------------------------------

def efficiency_lines(data: ReportData) -> list[str]:
    return [f"{r.name}: {r.efficiency.text()} (vs the decode roofline of {r.efficiency.model} on {r.efficiency.gpu})"
            for r in data.recipes if r.efficiency]


def render_markdown(data: ReportData, images: Sequence[tuple[str, str]] = ()) -> str:
    """The report as Markdown, ready to paste into a pull request; `images` are (title, relative
    path) of the PNG plots written beside it."""
    lines = [f"## {data.title}", ""]
    lines += md_table(*recipe_table(data))
    lines.append("")
    lines += md_table(*results_table(data))
    lines.append("")
    lines.append(reading_note(data))
    if data.selection:
        lines += ["", "**Runs used:**", ""] + [f"- {line}" for line in data.selection]
    if images:
        lines += ["", "### Plots"]
        for title, path in images:
            lines += ["", f"![{title}]({path})"]
    eff = efficiency_lines(data)
    if eff:
        lines += ["", "**Efficiency vs roofline:** " + "; ".join(eff)]
    if data.cost:
        lines += ["", f"### {data.cost_title}", ""] + [f"- {c}" for c in data.cost]
    lines += quality_section.markdown(data.quality, data.baseline, data.gate)
    if data.differences:
        lines += ["", "### What else differed", ""]
        for name, diffs in data.differences.items():
            lines.append(f"- {data.baseline} -> {name}:" + ("" if diffs else " no other difference recorded"))
            lines += [f"  - {d}" for d in diffs]
    if data.notes:
        lines += ["", "### Notes", ""] + [f"- {n}" for n in data.notes]
    lines += ["", f"<sub>generated by patchbench report, {data.generated_at}</sub>", ""]
    return "\n".join(lines)


# -- HTML -----------------------------------------------------------------------------------------------

_UNSURE = ("changed", "failed", "not checked", "not judged")  # a speed gain these qualify is not shown as one


def verdict_class(row: list[str]) -> str | None:
    """The class that colours a results row's verdict cell: "faster" (green) for a gain no answers or gate
    qualifier undercuts ("faster (sequential)", "faster, not informative"), "slower" (red) for a loss, else none."""
    text = str(row[-1]) if row else ""
    word = text.split(" ", 1)[0].rstrip(",")
    if word == "slower":
        return "slower"
    return "faster" if word == "faster" and not any(q in text for q in _UNSURE) else None


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


def render_html(data: ReportData, figures: Sequence[Plot] | None = None, svgs: Sequence[str] = (), *,
                nav: str = "", extra: str = "", by: str = "patchbench report") -> str:
    """One self-contained HTML page: the tables, inline SVG plots (`figures`, default
    `plots(data)`, then `svgs`: SVG documents drawn elsewhere, e.g. the kernel-family bars),
    differences, notes; `nav` (HTML) above the title and `extra` (HTML) at the end (the published
    site's links and sections)."""
    figures = plots(data) if figures is None else figures
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{_esc(data.title)}</title>", f"<style>{_CSS}</style></head><body>", nav,
             f"<h1>{_esc(data.title)}</h1>",
             f'<p class="note">generated by {_esc(by)}, {_esc(data.generated_at)}'
             + (f"; baseline {_esc(data.baseline)}" if len(data.recipes) > 1 else "") + "</p>",
             "<h2>Recipes</h2>", html_table(*recipe_table(data), 'class="recipes"'),
             "<h2>Results</h2>", html_table(*results_table(data), 'class="results"', verdict_class),
             f'<p class="note">{_esc(reading_note(data))}</p>']
    if data.selection:
        parts.append("<p><b>Runs used:</b></p><ul>" + "".join(f"<li>{_esc(x)}</li>" for x in data.selection) + "</ul>")
    eff = efficiency_lines(data)
    if eff:
        parts.append("<p><b>Efficiency vs roofline:</b> " + _esc("; ".join(eff)) + "</p>")
    parts += ["<h2>Plots</h2>", '<div class="plots">', *(svg(p.figure, p.title) for p in figures),
              *(x[x.find("<svg"):] for x in svgs), "</div>"]
    if data.cost:
        parts.append(f"<h2>{_esc(data.cost_title)}</h2><ul>" + "".join(f"<li>{_esc(c)}</li>" for c in data.cost) + "</ul>")
    parts += quality_section.html_section(data.quality, data.baseline, data.gate)
    if data.differences:
        parts.append("<h2>What else differed</h2><ul>")
        for name, diffs in data.differences.items():
            inner = "".join(f"<li>{_esc(d)}</li>" for d in diffs)
            parts.append(f"<li>{_esc(data.baseline)} -&gt; {_esc(name)}: "
                         + (f"<ul>{inner}</ul>" if diffs else "no other difference recorded") + "</li>")
        parts.append("</ul>")
    if data.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_esc(n)}</li>" for n in data.notes) + "</ul>")
    parts += [extra, "</body></html>"]
    return "\n".join(p for p in parts if p) + "\n"
