"""`run A B C` without `--repeats`/`--fixed` (and a plain `sweep`): launch in rounds until every
pair's sequential verdict is settled.

The first recipe is the reference; each other recipe is a pair with it, judged at every point of
the benchmark on the headline throughput (output_tok_s for serving, decode_tok_s for one-batch) by
`toolkit.analysis.sequential` from one value per launch. A round launches, in A B / B A order
alternately, the recipes still needed: a variant while its pair is unsettled at some point and
below `max_repeats` launches, the reference while any variant is (the side not ahead launches:
`toolkit.analysis.sequential_steps.wanted`, the steps' rule too). Stored runs of the same run
identity (toolkit/results/identity.py) count, oldest first, as in `toolkit.analysis.variants`: a
killed run resumes from the store (its sweep: the same campaign), and one already settled launches
nothing. A pair judges only the launches made in a campaign of both sides (toolkit.analysis.campaigns):
a side's stored runs from another campaign (a reference another call measured, before the box
changed) are not in its looks, and that side launches again here, interleaved, until both have their
launches; with `[benchmark] pool_stored_spread` their spread (around their own mean) is pooled as the
looks' prior (`seq.verdict(prior=...)`), so a second campaign against a stored reference still settles
sooner without judging the box's drift between campaigns. A recipe gets at
most `max_repeats` attempts in one call, and none after `min_repeats` launches that gave no value
(a failing recipe does not loop; a failing reference stops the round).

Effects: server launches through `toolkit.run.pipeline.run_once`, store writes, console lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape

from toolkit.analysis import sequential as seq
from toolkit.analysis.selection import Criteria, MissingResults, choose, values_at
from toolkit.analysis.sequential_steps import wanted
from toolkit.errors import PatchbenchError
from toolkit.results.store import Store
from toolkit.results import metrics as registry
from toolkit.run.attempt import Prepared


@dataclass(frozen=True)
class PairVerdict:
    reference: str
    recipe: str
    metric: str
    point: int
    verdict: seq.Sequential
    counted: tuple[int, int] = (0, 0)  # runs of (reference, recipe) launched in a campaign of both
    reused: tuple[str, ...] = ()  # toolkit.analysis.campaigns.describe of the runs left out

    @property
    def text(self) -> str:
        from toolkit.analysis.campaigns import qualifier

        return self.verdict.text + qualifier(self.reused)

    def to_dict(self) -> dict:
        v = self.verdict
        return {"reference": self.reference, "recipe": self.recipe, "metric": self.metric, "point": self.point,
                "verdict": v.verdict, "settled": v.settled, "launches_each": v.n, "ratio": v.ratio,
                "low": v.low, "high": v.high, "speedup": v.speedup, "noisy": v.noisy, "spread": v.spread,
                "prior_dof": v.prior_dof, "reused": list(self.reused), "text": self.text}


def metric_of(p: Prepared) -> str:
    return "decode_tok_s" if p.recipe.benchmark.driver == "one-batch" else "output_tok_s"


def points_of(p: Prepared) -> list[int]:
    b = p.recipe.benchmark
    return list(b.batch_sizes if b.driver == "one-batch" else b.concurrency)


def stored_runs(store: Store, p: Prepared, identity: str, metric: str) -> list[str]:
    """Runs of this identity that count (selection's rule), oldest first, whatever label they carry."""
    import dataclasses

    rows = [r if r.recipe == p.name else dataclasses.replace(r, recipe=p.name)
            for r in store.runs(identity=identity, status="ok")]
    try:
        sel = choose(rows, [p.name], Criteria(identity=identity, prefer_group=False),
                     measured=store.measured_metrics([r.run_id for r in rows]), metrics=[metric])
    except MissingResults:
        return []
    return sel.run_ids(p.name)


def verdicts(store: Store, prepared: list[Prepared], runs: dict[str, list[str]], design: seq.Design,
             here: str | None = None) -> list[PairVerdict]:
    """Every pair's verdict (reference = prepared[0]) at every common point, from the runs of `runs`
    each pair launched in a campaign of both sides or in `here`, the sweep launching now
    (toolkit.analysis.campaigns); the others are named in the verdict and, where the design pools
    stored spread, lend their spread as a prior. Of the counted runs, those of one side that started
    before the other side's first launch were stored before the pair's launching began
    (toolkit.analysis.noise_prior.stored_before): a look pools the spread of those it does not use;
    a recipe flagged far noisier than its peers at a point (spread_flag) pools none there."""
    from toolkit.analysis import campaigns, noise_prior, spread_flag

    ref, out = prepared[0], []
    metric = metric_of(ref)
    hib = registry.higher_is_better(metric)
    samples = {p.name: store.samples(runs[p.name], metric=metric) for p in prepared}
    rows, splits = _splits(store, prepared, runs, here)
    reused = {p.name: campaigns.left_out(ref.name, p.name, splits[p.name], rows) for p in prepared[1:]}
    judged, _ = judged_of(ref.name, splits, runs)
    for point in [x for x in points_of(ref) if any(x in points_of(p) for p in prepared[1:])]:
        here_ = [p for p in prepared if point in points_of(p)]
        # the spread flag reads the launches judged: a stored run from before the box changed is no spread
        values = {p.name: values_at(samples[p.name], metric, point, judged[p.name]) for p in here_}
        noisy = {f.name for f in spread_flag.flags(values)}
        for p in here_[1:]:
            sp = splits[p.name]
            a, b = (values_at(samples[n], metric, point, list(i)) for n, i in ((ref.name, sp.a), (p.name, sp.b)))
            sa, sb = noise_prior.stored_before([rows[r].started_at for r in sp.a], [rows[r].started_at for r in sp.b])
            calm = not noisy & {ref.name, p.name}
            counts = (len(values_at(samples[ref.name], metric, point, list(sp.a[:sa]))),
                      len(values_at(samples[p.name], metric, point, list(sp.b[:sb])))) if calm else (0, 0)
            prior = noise_prior.from_history({
                ref.name: values_at(samples[ref.name], metric, point, list(sp.reused_a)),
                p.name: values_at(samples[p.name], metric, point, list(sp.reused_b))}) \
                if calm and sp.reused and design.pool_stored else None
            out.append(PairVerdict(ref.name, p.name, metric, point,
                                   seq.verdict(a, b, higher_is_better=hib, design=design, stored=counts, prior=prior),
                                   (len(sp.a), len(sp.b)), reused[p.name]))
    order = {p.name: i for i, p in enumerate(prepared)}
    return sorted(out, key=lambda v: order[v.recipe])


def judged_of(ref: str, splits: dict, runs: dict[str, list[str]]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(name -> the runs its verdicts judge, name -> its runs reused from another campaign, not judged),
    order kept, from each pair's `campaigns.split` against the reference `ref` (`splits`: name -> Split):
    the reference's judged runs are those any pair judged. A name in no pair keeps all its runs."""
    kept = {ref: set()} if splits else {}
    for name, sp in splits.items():
        kept[ref] |= set(sp.a)
        kept[name] = set(sp.b)
    judged = {n: [r for r in ids if n not in kept or r in kept[n]] for n, ids in runs.items()}
    reused = {n: [r for r in ids if n in kept and r not in kept[n]] for n, ids in runs.items()}
    return judged, {n: ids for n, ids in reused.items() if ids}


def judged_runs(store: Store, prepared: list[Prepared], runs: dict[str, list[str]],
                here: str | None = None) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """`judged_of` over the stored runs: which of `runs` the verdicts of `prepared` judge (launched in a
    campaign of both sides of a pair, or in `here`), and which they leave out (toolkit.analysis.campaigns)."""
    return judged_of(prepared[0].name, _splits(store, prepared, runs, here)[1], runs)


def _splits(store: Store, prepared: list[Prepared], runs: dict[str, list[str]], here: str | None) -> tuple[dict, dict]:
    """(run id -> stored row, name -> campaigns.Split of its runs against the reference prepared[0]'s)."""
    from toolkit.analysis import campaigns

    ref = prepared[0]
    ids = [rid for p in prepared for rid in runs.get(p.name, ())]
    rows = {r.run_id: r for r in store.runs(run_ids=ids)} if ids else {}
    rows_of = {p.name: [rows[rid] for rid in runs.get(p.name, ()) if rid in rows] for p in prepared}
    return rows, {p.name: campaigns.split(rows_of[ref.name], rows_of[p.name], here) for p in prepared[1:]}


def measure_until_settled(prepared: list[Prepared], *, home, store: Store, group_id: str, console: Console,
                          design: seq.Design, result: dict, same_server=None) -> list[PairVerdict]:
    """Launch rounds until every pair is settled or at max_repeats; appends each run to
    result["runs"] and each run that could not begin to result["failed"]; returns the verdicts.
    `same_server` (toolkit.run.same_server.Guard, a sweep's): a recipe whose launch is an earlier
    one's server leaves the rounds after that launch (named in the guard's `same`)."""
    import contextlib
    import dataclasses

    from toolkit.run.identity import expected_identity
    from toolkit.run.machine import this_gpu_key

    from toolkit.analysis.sequential_design import launched_under

    gpu = this_gpu_key()
    metric = metric_of(prepared[0])
    # each run records the design it was launched under (compare and the report judge the pair with it)
    keys = {p.name: expected_identity(p.recipe, p.env.key, gpu) for p in prepared}
    prepared = without_the_reference_twice(prepared, keys, console=console, result=result)
    # and the configurations launched together (a killed call is told from another campaign by it)
    campaign = sorted(keys[p.name] for p in prepared)
    prepared = [launched_under(dataclasses.replace(p, extra={**p.extra, "campaign": campaign}), design)
                for p in prepared]
    runs = {p.name: stored_runs(store, p, keys[p.name], metric) for p in prepared}
    for p in prepared:  # the same configuration stored under another label counts: say so (compare reads labels)
        other = [r.recipe for r in store.runs(run_ids=runs[p.name]) if r.recipe != p.name] if runs[p.name] else []
        if other:
            labels = sorted(set(other))
            result.setdefault("counted_as", {})[p.name] = labels
            console.print(f"[dim]{escape(p.name)}: counts {len(other)} stored run(s) of its configuration (run identity "
                          f"{keys[p.name][:12]}) labelled {escape(', '.join(labels))}; `patchbench compare` reads them "
                          f"under that label[/]")
    resumed = resumed_group(store, runs, campaign)
    with contextlib.ExitStack() as leases:  # one process at a time measures a sweep (another person, terminal)
        if resumed is not None and resumed != group_id:  # a killed call of the same recipes: its launches continue it
            if leases.enter_context(store.lease(f"group-{resumed}")):
                group_id = result["group_id"] = resumed
                console.print(f"[dim]resuming sweep {escape(resumed)}: its stored runs count, new launches join it[/]")
            else:
                note = (f"sweep {resumed} is being measured by another process now: its stored runs count, this "
                        f"call's launches go to a new sweep {group_id}")
                result.setdefault("notes", []).append(note)
                console.print(f"[yellow]note[/]: {escape(note)}")
        if group_id != resumed:
            leases.enter_context(store.lease(f"group-{group_id}"))
        return _launch_rounds(prepared, runs, keys, home=home, store=store, group_id=group_id, console=console,
                              design=design, result=result, same_server=same_server)


def _launch_rounds(prepared: list[Prepared], runs: dict[str, list[str]], keys: dict[str, str], *, home, store: Store,
                   group_id: str, console: Console, design: seq.Design, result: dict,
                   same_server=None) -> list[PairVerdict]:
    """measure_until_settled's rounds, in the sweep `group_id` this process holds."""
    from toolkit.run.pipeline import run_once

    metric = metric_of(prepared[0])
    reused = {name: len(ids) for name, ids in runs.items()}
    attempts = {p.name: 0 for p in prepared}
    failures = {p.name: 0 for p in prepared}  # launches that gave no value
    if same_server is not None:  # known from their stored launches to be an earlier recipe's server
        prepared = [p for p in prepared if p.name not in same_server.same]
    ref = prepared[0]
    rnd = 0
    answer_rules = answer_rules_of(store, prepared, keys)

    def launchable(p: Prepared) -> bool:
        return attempts[p.name] < design.max_repeats and failures[p.name] < design.min_repeats

    while True:
        current = verdicts(store, prepared, runs, design, here=group_id)
        # a side launches while it is not ahead (the verdicts look at equal-sized prefixes of the launches
        # each pair made together in a campaign: a reused side launches again here): settle_pairs' rule
        dry = {p.name for p in prepared if not launchable(p)}
        chosen: set[str] = set()
        for v in current:
            if seq.more_needed(v.verdict):
                chosen |= wanted([(ref.name, v.recipe)], {ref.name: v.counted[0], v.recipe: v.counted[1]}, dry)
        if not chosen:
            break
        order = [p for p in prepared if p.name in chosen]
        for p in order if rnd % 2 == 0 else order[::-1]:  # A B, B A, A B ...
            if same_server is not None and p.name in same_server.same:  # found a copy earlier in this round
                continue
            attempts[p.name] += 1
            try:
                rid = run_once(p, home=home, store=store, repeat=len(runs[p.name]), group_id=group_id, console=console,
                               answer_rule=answer_rules.get(p.name), same_server=same_server)
            except PatchbenchError as exc:  # the run could not even be begun in the store
                failures[p.name] += 1
                result["failed"].append((p.name, str(exc.located(recipe=p.name))))
                console.print(f"[red]error[/]: {escape(str(exc))}")
                continue
            result["runs"].append((p.name, rid))
            if same_server is not None and same_server.same:  # another's server (this one, or one it copies)
                prepared = [q for q in prepared if q.name not in same_server.same]
                if p.name in same_server.same:
                    continue
            if store.get_run(rid).status == "ok" and values_at(store.samples([rid], metric=metric), metric,
                                                                points_of(p)[0], [rid]):
                runs[p.name].append(rid)
            else:
                failures[p.name] += 1
        rnd += 1
    result["reused"] = reused
    # the runs the verdicts judged, and apart the stored runs of another campaign they left out; the spread
    # flag reads the judged ones (a box that changed between campaigns is no launch-to-launch spread)
    judged, left = judged_runs(store, prepared, runs, here=group_id)
    result["used"] = judged
    result["reused_runs"] = left
    result["spread_flags"] = spread_flags(store, prepared, judged)
    return current


def resumed_group(store: Store, runs: dict[str, list[str]], campaign: list[str] | None = None) -> str | None:
    """The sweep a call continues: the newest sweep in which every recipe has a stored run (a call of
    the same recipes that was killed, or asked again with a larger cap), or whose runs were all
    launched by a call of the same configurations (`campaign`: their run identities; killed before each
    had a run), so that the runs of both calls are one interleaved sweep for `compare` and the report
    (selection's newest-sweep rule); None when no sweep holds them (a new one)."""
    if not runs or not any(runs.values()):
        return None
    rows = store.runs(run_ids=[rid for ids in runs.values() for rid in ids])
    name_of = {rid: name for name, ids in runs.items() for rid in ids}
    covers: dict[str, set] = {}
    newest: dict[str, str] = {}
    for r in rows:
        if r.group_id:
            covers.setdefault(r.group_id, set()).add(name_of[r.run_id])
            newest[r.group_id] = max(newest.get(r.group_id, ""), r.started_at or "")
    complete = [g for g, names in covers.items() if names == set(runs)]
    if not complete and campaign is not None:
        complete = [g for g in covers if all((r.extra or {}).get("campaign") == campaign for r in rows if r.group_id == g)]
    return max(complete, key=lambda g: newest[g]) if complete else None


def without_the_reference_twice(prepared: list[Prepared], keys: dict[str, str], *, console: Console,
                                result: dict) -> list[Prepared]:
    """`prepared` less the recipes that are the reference's own configuration (the same run identity:
    env, server arguments, benchmark; e.g. a sweep's matrix point that repeats the default's values):
    their runs are the reference's, and a verdict of them against it would read the same runs on
    both sides. Named in result["same_as_reference"]. Only such recipes besides the reference: BadInput."""
    from toolkit.errors import BadInput

    ref = prepared[0]
    same = [p.name for p in prepared[1:] if keys[p.name] == keys[ref.name]]
    if not same:
        return prepared
    if len(same) == len(prepared) - 1:
        raise BadInput(f"{ref.name} and {', '.join(same)} are one configuration (the same env, server arguments and "
                       f"benchmark: run identity {keys[ref.name][:12]}): a comparison would read the same runs on "
                       "both sides", hint="compare recipes that differ; one recipe's launch-to-launch spread is in "
                       f"`patchbench report {ref.name}`")
    result["same_as_reference"] = same
    for name in same:
        console.print(f"[yellow]note[/]: {escape(name)} is {escape(ref.name)}'s own configuration (same run identity): "
                      "its runs are the reference's, no verdict against itself")
    return [p for p in prepared if p.name not in same]


def answer_rules_of(store: Store, prepared: list[Prepared], keys: dict[str, str]) -> dict:
    """{candidate: its toolkit.analysis.answers_rule rule}: a candidate's launch asks its answers only while
    its sequential answers verdict against the reference (prepared[0], its stored runs of this identity)
    is unsettled; the reference keeps its recipe's rule (its floor needs its launches)."""
    from toolkit.analysis import answers_rule

    ref = prepared[0]
    reference = lambda: store.runs(recipe=ref.name, identity=keys[ref.name])  # noqa: E731
    rules = {p.name: answers_rule.for_recipe(store, p, keys[p.name], reference) for p in prepared[1:]}
    return {name: rule for name, rule in rules.items() if rule is not None}


def spread_flags(store: Store, prepared: list[Prepared], runs: dict[str, list[str]]) -> list[dict]:
    """toolkit.analysis.spread_flag over the recipes' per-launch values at each common point."""
    from toolkit.analysis.compare import flags_at

    metric = metric_of(prepared[0])
    return [f for point in points_of(prepared[0]) if all(point in points_of(p) for p in prepared)
            for f in flags_at(store, metric, point, {p.name: runs[p.name] for p in prepared})]
