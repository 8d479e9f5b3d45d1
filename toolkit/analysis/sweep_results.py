"""A sweep's results (pure over stored samples): the ranked table, verdicts against the default
configuration, the Pareto points and the JSON document (`patchbench sweep --json`, docs/JSON.md).

Ranking: a plain sweep ranks by `metric` at `point` (direction from the metric registry), and the
verdict compares a variant's per-run values with the default configuration's (the unexpanded
recipe) at that point. An SLA search ranks by the concurrency it reports (toolkit/analysis/sla.py:
the highest meeting every bound when a ceiling such as itl_ms_p99<=50 is among them, highest first;
with floors only, such as output_tok_s>=500, the lowest, lowest first), then by output tok/s there,
and the verdict compares output tok/s under the SLA: the variant's at its reported concurrency
against the default's at the default's. Each bound's verdict there states the runs' spread
("passes", "at the bound", sla.judge). Verdicts: toolkit/analysis/stats.py; "-" where the default
has no runs to compare. Beside the speed, as in compare: the answers' verdict and, for variants that
ran the gate tier, the gate's against the default's evaluation (a failed gate is said in the row).
A variant whose launch was another configuration's server (toolkit.run.same_server: sglang resolved
both to one configuration) is not measured: its row, beside that one's, shows that one's numbers and
reads "same server as NAME".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from rich.markup import escape
from rich.table import Table

from toolkit.analysis import gate_verdict, pareto, quality_runs, stats
from toolkit.analysis.launch_cost import gpus_of
from toolkit.analysis.sla import FLOOR, Bound
from toolkit.analysis.sweep import Outcome, mean_ci, values
from toolkit.results.store import Store
from toolkit.results import metrics


@dataclass
class Row:
    name: str
    point: int | None
    mean: float
    ci: tuple[float, float]
    n: int
    verdict: str
    change_pct: float | None


def _runs_at(o: Outcome, point: int) -> list[str]:
    return o.points.get(point, [])


def _ids(x: Outcome) -> list[str]:
    return list(dict.fromkeys([*x.runs, *(r for rs in x.points.values() for r in rs)]))


def _answers(store: Store, ref: dict, o: Outcome) -> str | None:
    """The worst answers' verdict of a variant against the default configuration's answered launches
    `ref` (quality_runs.launches) over its quality points (toolkit.analysis.quality_runs), None without
    a declared [quality]; its broken runs (stored invalid) count here."""
    broken = [r for r in store.runs(recipe=o.name, status="invalid") if quality_runs.status(r) == "broken"]
    return quality_runs.worst(quality_runs.judge_launches(ref, [*store.runs(run_ids=_ids(o)), *broken]))


def gates(store: Store, outcomes: Sequence[Outcome]) -> dict:
    """{variant: GateVerdict}: the gate's verdict of each measured variant that ran the gate tier,
    against the default configuration's evaluation (quality_runs.gate_of)."""
    default = outcomes[0]
    ref = store.runs(run_ids=_ids(default))
    out = {}
    for o in outcomes[1:]:
        if o.pruned or o.failed or not _ids(o):
            continue
        g = quality_runs.gate_of(store.runs(run_ids=_ids(o)), ref)
        if g is not None:
            out[o.name] = g
    return out


def rows(store: Store, outcomes: Sequence[Outcome], metric: str, *, sla: Sequence[Bound] = (),
         point: int | None = None, sequential=None, gate: dict | None = None) -> list[Row]:
    """The measured outcomes ranked (best first), outcomes[0] being the default configuration;
    `sequential` (a `toolkit.analysis.sequential.Design`): the sweep launched until settled under it,
    so every verdict is the sequential one (`sequential.settle(launched=True)`), as `run` printed it. `gate`: `gates(store, outcomes)`; a
    variant that failed it reads "..., gate failed"."""
    default = outcomes[0]
    hib = metrics.higher_is_better(metric)
    out = []
    ref = None  # the default's answered launches, read once (when the first variant needs them)
    for o in outcomes:
        if o.pruned or o.failed or o.same_as or (sla and (o.search is None or o.search.best is None)):
            continue
        at = o.search.best if sla else point
        runs = _runs_at(o, at)
        xs = values(store, runs, metric, at)
        answers = None
        if o is not default:
            if ref is None:
                ref = quality_runs.launches(store.runs(run_ids=_ids(default)), sane_only=True)
            answers = _answers(store, ref, o)
        if not xs:
            if answers == "broken output":  # every run invalid: shown, never ranked as a result
                out.append(Row(o.name, at, math.nan, (math.nan, math.nan), 0, "broken output (runs invalid)", None))
            continue
        m, lo, hi = mean_ci(xs)
        verdict, change = "-", None
        base_at = (default.search.best if default.search else None) if sla else at
        base = values(store, _runs_at(default, base_at), metric, base_at) if base_at else []
        if o is not default and base:
            c = stats.compare_values(base, xs, higher_is_better=hib, unit=metrics.unit_of(metric))
            if sequential is not None:  # launched until settled: 2 launches each can be a verdict
                from toolkit.analysis import sequential as seq

                from toolkit.analysis import campaigns
                from toolkit.analysis.compare import stored_counts

                base_runs = _runs_at(default, base_at)
                sp = campaigns.split_ids(store, base_runs, runs)  # the launches made together, as `run` judged
                if sp.a and sp.b:
                    base_runs, runs_here = list(sp.a), list(sp.b)
                    base, ys = values(store, base_runs, metric, base_at), values(store, runs_here, metric, at)
                else:
                    runs_here, ys = runs, xs
                sa, sb = stored_counts(store, base_runs, runs_here)  # runs -> their values, as `run` counts them
                c = seq.settle(stats.compare_values(base, ys, higher_is_better=hib, unit=metrics.unit_of(metric)),
                               base, ys, sequential,
                               (len(values(store, base_runs[:sa], metric, base_at)) if sa else 0,
                                len(values(store, runs_here[:sb], metric, at)) if sb else 0),
                               launched=True)
            verdict, change = c.verdict, c.change_pct
        if answers:  # "faster, answers changed" never reads as a plain win
            verdict = f"{verdict}, {answers}"
        g = (gate or {}).get(o.name)
        if g is not None and g.verdict != gate_verdict.PASSED:  # nor "faster, gate failed" (or "gate not judged")
            verdict = f"{verdict}, {g.verdict}"
        elif o is default:
            verdict = "default"
        out.append(Row(o.name, at, m, (lo, hi), len(xs), verdict, change))
    measured = {r.name: r for r in out}
    out += [Row(o.name, r.point, r.mean, r.ci, r.n, f"same server as {o.same_as}", None)
            for o in outcomes if o.same_as and (r := measured.get(o.same_as)) is not None]
    sign = -1 if hib is not False else 1  # (a stable sort: a "same server" row stays after its server's)
    if sla:
        up = -1 if not floors_only(sla) else 1  # the highest concurrency first, with floors only the lowest
        out.sort(key=lambda r: (math.isnan(r.mean), up * (r.point or 0), sign * (r.mean if not math.isnan(r.mean) else 0)))
    else:
        out.sort(key=lambda r: (math.isnan(r.mean), sign * (r.mean if not math.isnan(r.mean) else 0)))
    return out


def floors_only(sla: Sequence[Bound]) -> bool:
    return bool(sla) and all(b.kind == FLOOR for b in sla)


def limit_header(sla: Sequence[Bound]) -> str:
    kinds = {b.kind for b in sla}
    return "min concurrency" if kinds == {FLOOR} else "concurrencies" if len(kinds) == 2 else "max concurrency"


def limit_cell(o: Outcome) -> str:
    s = o.search
    rng = s.passing if s else None
    if rng is None:
        return "-"
    return f"{rng[0]}..{rng[1]}" if s.kind == "both" else str(s.best)


def pareto_points(store: Store, outcomes: Sequence[Outcome]) -> list[pareto.Point]:
    pts = []
    for o in outcomes:
        if o.recipe is None or o.pruned:
            continue
        for c, runs in sorted(o.points.items()):
            xs = values(store, runs, "output_tok_s", c)
            if xs:
                pts.append(pareto.point(o.name, c, xs, gpus_of(o.recipe.server.args)))
    return pts


def render(table_rows: Sequence[Row], metric: str, outcomes: Sequence[Outcome], *, sla: Sequence[Bound] = (),
           dominated: Sequence[str] = (), title: str = "") -> Table:
    unit = metrics.unit_of(metric)
    t = Table(title=title or None, title_justify="left")
    t.add_column("#", justify="right")
    t.add_column("variant", overflow="fold")
    if sla:
        t.add_column(limit_header(sla), justify="right")
        t.add_column("points", justify="right")
        for b in sla:
            t.add_column(f"{b} there", overflow="fold")
    else:
        t.add_column("at", justify="right")
    t.add_column(f"{metric} ({unit}) [95% CI]", justify="right")
    t.add_column("vs default", overflow="fold")
    by_name = {o.name: o for o in outcomes}
    for i, r in enumerate(table_rows, 1):
        cell = stats.format_mean_ci(r.mean, r.ci[0], r.ci[1], r.n)
        verdict = r.verdict + (f" ({r.change_pct:+.1f}%)" if r.change_pct is not None else "")
        name = f"[dim]{escape(r.name)} (dominated)[/]" if r.name in dominated else escape(r.name)
        if sla:
            o = by_name[r.name]
            o = by_name.get(o.same_as, o)  # the server it was: that one's search
            s = o.search
            there = [v.text for v in s.verdicts.get(r.point, ())]
            t.add_row(str(i), name, limit_cell(o), f"{len(s.measured)}/{s.max_points}", *there, cell, verdict)
        else:
            t.add_row(str(i), name, str(r.point), cell, verdict)
    return t


def _sla_doc(o: Outcome) -> dict:
    s = o.search
    rng = s.passing
    return {"kind": s.kind, "limit": s.best, "passing": list(rng) if rng else None,
            "max_concurrency": rng[1] if rng and s.kind != FLOOR else None,
            "min_concurrency": rng[0] if rng and s.kind != "ceiling" else None,
            "fails_at_lowest": bool(s.ceiling and s.ceiling.never_passes), "none": s.why_none(),
            "range": [s.lo, s.hi], "measured": [list(m) for m in s.measured], "bound_points": s.max_points,
            "at_max": o.at_best, "verdicts": [v.to_dict() for v in s.verdicts.get(s.best, ())] if s.best else [],
            "breaks": o.breaks}


def document(table_rows: Sequence[Row], outcomes: Sequence[Outcome], points: Sequence[pareto.Point], *,
             recipe: str, metric: str, sla: Sequence[Bound] = (), repeats: int | None = None,
             gate: dict | None = None) -> dict:
    """The JSON form (docs/JSON.md, `sweep`); `repeats`: the runs per SLA point (for the legend);
    `gate`: `gates(store, outcomes)`."""
    from toolkit.analysis.sla import legend

    front = {(p.variant, p.concurrency) for p in pareto.front(points)}
    return {
        "recipe": recipe,
        "metric": metric,
        "sla": [str(b) for b in sla],
        "sla_legend": legend(repeats) if sla and repeats else None,
        "ranked": [{"variant": r.name, "point": r.point, "mean": r.mean, "ci": list(r.ci), "n": r.n,
                    "verdict": r.verdict, "change_pct": r.change_pct} for r in table_rows],
        "variants": [{
            "variant": o.name, "pruned": o.pruned, "failed": o.failed, "runs": o.runs, "reused": o.reused,
            "reused_runs": o.reused_runs,
            "same_server_as": o.same_as, "sla": None if o.search is None else _sla_doc(o),
        } for o in outcomes],
        "pareto": [{"variant": p.variant, "concurrency": p.concurrency, "tok_s_per_user": p.per_user,
                    "tok_s_per_gpu": p.per_gpu, "on_front": (p.variant, p.concurrency) in front} for p in points],
        "dominated": pareto.dominated_variants(points),
        "dominated_legend": pareto.legend(),
        "gate": {v: g.to_dict() for v, g in (gate or {}).items()},
    }
