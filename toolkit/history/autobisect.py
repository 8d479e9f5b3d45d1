"""Automatic bisects of change points: each change point in the asked direction (a regression by
default, a gain with `direction="better"`) starts the existing bisect (`toolkit.analysis.bisect`)
between its two neighbouring measured points, and the commit it names is stored with the change point.
Effects: builds and runs variants (through `VariantMeter`), writes the bisect's runs into the store
and its verdicts into `PATCHBENCH_HOME/history/<recipe>/<source>.json`.

Between two releases the bisect runs over the commits between their tags (a git repository of the
project is needed: `--git`; without one the release itself is what is named, and nothing is stored). Between two commits of a
tracked branch it runs over the first-parent commits between them; adjacent points name the later
one without a build. The bisect's threshold is half the change point's own size unless one is given.
A change point is keyed by its neighbours, the metric and the direction: one bisected before (named
or not) is not bisected again; one whose bisect failed is tried again next time.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from toolkit.analysis.bisect import BaseNotMeasured, bisect_items
from toolkit.analysis.bisect_rule import legend, step_design
from toolkit.analysis.releases import git_variant, tag_for
from toolkit.analysis import search_campaign
from toolkit.analysis.variants import VariantMeter, upstream_commits
from toolkit.errors import PatchbenchError
from toolkit.history.points import Point, variant_for
from toolkit.history.series import Entry
from toolkit.recipe.load import Recipe
from toolkit.results.store import Store
from toolkit.results.metrics import MetricSpec


def state_path(home: Path, recipe: str, source: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", recipe)
    return home / "history" / slug / f"{source}.json"


def load_state(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {"bisects": {}}


def save_state(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def key_of(before: Entry, after: Entry, metric: str, direction: str) -> str:
    return f"{metric}:{direction}:{before.id}..{after.id}"


def _point(e: Entry) -> Point:
    return Point(e.id, e.order, e.kind, e.date, e.tag)


def bisect_change(recipe: Recipe, source: str, before: Entry, after: Entry, *, direction: str, spec: MetricSpec,
                  change_pct: float, home: Path, store: Store, console: Console, git: str | None = None,
                  tag_format: str = "v{version}", threshold: float | None = None, repeats: int = 3,
                  max_repeats: int = 8, group_id: str = "") -> dict:
    """Bisect the commits between two neighbouring measured points; the verdict as a dict."""
    thr = threshold if threshold is not None else max(1.0, abs(change_pct) / 2)
    verdict = {"before": before.label, "after": after.label, "direction": direction, "threshold_pct": thr,
               "change_pct": change_pct, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if before.kind == "release":
        if not git:
            return {**verdict, "culprit": after.label, "culprit_kind": "release", "builds": 0,
                    "message": f"release {after.label} (give --git to bisect its commits)"}
        good_rev, bad_rev = (e.tag or tag_for(e.id, tag_format) for e in (before, after))
        base = git_variant(recipe, source, git, good_rev, home)
    else:
        good_rev, bad_rev = before.id, after.id
        base = variant_for(recipe, source, _point(before), home)
    commits = upstream_commits(base, source, good_rev, bad_rev, home)
    verdict["commits"] = len(commits) - 1
    if len(commits) == 2:
        return {**verdict, "culprit": commits[1][:12], "culprit_id": commits[1], "culprit_kind": "commit",
                "builds": 0, "message": f"{commits[1][:12]} is the only commit between them"}
    console.print(f"[bold]bisect[/] {direction} change {before.label} -> {after.label}: {len(commits) - 1} commits "
                  f"({good_rev}..{bad_rev}), threshold {thr:.1f}%")
    initial = max(2, repeats)
    # the probes' runs record the design they were launched under (`extra["sequential"]`), as `run`'s do
    # its looks read only this bisect's launches (toolkit.analysis.search_campaign): the two points' runs
    # an earlier `track` measured are left out (named in "left_out") and launched again here; a killed
    # bisect of the same change continues its own sweep under its lease (another process continuing it: a
    # new sweep), a finished one is replayed, nothing launched, as `patchbench bisect` does
    search = search_campaign.key("history --bisect", recipe.name, key_of(before, after, str(spec), direction), thr,
                                 initial, max_repeats)
    common = dict(recipe=recipe, source=source, commits=commits, spec=spec, thr=thr, initial=initial,
                  max_repeats=max_repeats, direction=direction, verdict=verdict, home=home, store=store,
                  console=console, base=base, search=search)
    try:
        with contextlib.ExitStack() as leases:  # the sweep's lease, held while this bisect measures in it
            return _measure(**common, group_id=group_id, leases=leases, fresh=False)
    except search_campaign.NotReplayable as exc:  # a finished sweep that cannot answer: never launched into
        console.print(f"note: {escape(str(exc))}: measuring again in a new campaign (its runs are left out and named)",
                      highlight=False)
    with contextlib.ExitStack() as leases:
        return _measure(**common, group_id=uuid.uuid4().hex[:12], leases=leases, fresh=True)


def _measure(*, recipe: Recipe, source: str, commits: list[str], spec: MetricSpec, thr: float, initial: int,
             max_repeats: int, direction: str, verdict: dict, home: Path, store: Store, console: Console, base: Recipe,
             search: str, group_id: str, leases, fresh: bool) -> dict:
    """The bisect of `commits` in its campaign (toolkit.analysis.search_campaign); its sweep marked finished
    once answered."""
    meter = VariantMeter(base, home, store, spec, console, group_id=group_id, search=search, fresh=fresh,
                         leases=leases,
                         design=step_design(threshold_pct=thr, initial_repeats=initial, max_repeats=max_repeats))

    def measure(k: int, r: int):
        return meter.measure(commits[k][:12], {source: {"rev": commits[k]}}, r, recipe=base)

    def ready(k: int) -> bool:  # built before its reference's launch just before it
        return meter.ready(commits[k][:12], {source: {"rev": commits[k]}}, recipe=base)

    try:
        result = bisect_items([c[:12] for c in commits], measure, ready=ready, higher_is_better=spec.info.higher_is_better,
                              threshold_pct=thr, initial_repeats=initial, max_repeats=max_repeats,
                              direction=direction, on_step=lambda s: console.print(s.line),
                              # the rule `patchbench bisect` uses: a step's anytime-valid confidence sequence, one
                              # value a side per look (the fixed t interval re-read after each top-up inflates its alpha)
                              sequential=True, repeat_step=1)
    except BaseNotMeasured as exc:
        raise exc.because(meter.skipped.get(commits[0][:12]), recipe=recipe.name) from None
    meter.finish()  # answered: asked again (its verdict file lost), it replays this sweep, never launches into it
    rule = legend(threshold_pct=thr, direction=direction, max_repeats=max(max_repeats, initial))  # bisect_stack's cap
    out = {**verdict, "rule": rule, "culprit": result.culprit_label, "culprit_kind": "commit", "confirmed": result.confirmed,
           "candidates": result.candidates, "builds": meter.builds, "runs": meter.runs, "message": result.message,
           "steps": [s.to_dict() for s in result.steps],  # what each step compared (n a side), as printed
           **meter.evidence()}  # the runs each probe's values came from, and why a probe gave none
    if result.culprit is not None:
        out["culprit_id"] = commits[result.culprit]
    return out


def bisect_new(recipe: Recipe, source: str, changes: list[tuple[Entry, Entry, str, float]], *, spec: MetricSpec,
               home: Path, store: Store, console: Console, **kw) -> tuple[dict, list[str]]:
    """Bisect each (before, after, direction, change %) not bisected before. Returns (every stored
    verdict of this recipe and source by key, the keys bisected now)."""
    path = state_path(home, recipe.name, source)
    state = load_state(path)
    new = []
    for before, after, direction, pct in changes:
        key = key_of(before, after, str(spec), direction)
        if key in state["bisects"]:
            continue
        try:
            verdict = bisect_change(recipe, source, before, after, direction=direction, spec=spec, change_pct=pct,
                                    home=home, store=store, console=console, **kw)
        except PatchbenchError as exc:
            console.print(f"[red]bisect {before.label} -> {after.label} failed[/]: {exc}")
            continue
        if verdict.get("culprit_kind") == "release":  # nothing bisected: a later --git still can
            console.print(f"change {before.label} -> {after.label}: {verdict['message']}")
            continue
        state = load_state(path)
        state["bisects"][key] = verdict
        save_state(path, state)
        new.append(key)
    return state["bisects"], new
