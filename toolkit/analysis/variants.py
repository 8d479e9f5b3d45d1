"""Variants of a recipe (a prefix of its patch stack, the stack minus one patch, another upstream
commit) measured through the normal pipeline, with results cached per run identity in the store.

This is the effectful edge that `attribute` and `bisect` (pure) measure through: a variant is
prepared (apply -> build -> static check); an apply or build failure is a *skip* (None, its reason
in `VariantMeter.skipped`), as `git bisect run`'s exit 125. Runs already stored are reused only
when they have the run identity this variant's run would have (toolkit/results/identity.py: env
key, server arguments and env, model, target, benchmark, GPUs) and `toolkit.analysis.selection`
counts them (verified benchmark runs with samples, measured here: never imported), one value per
run, so a bisect can be resumed or replayed without measuring again. A new run gives a value under
the same rule (`VariantMeter.rule`), so a replay decides as the first measurement did: a run stored
`invalid` for missing activation evidence counts in neither (in both with `missing_evidence`); one
stored `invalid` for broken output counts in both, its answers verdict ("broken output") printed
beside its value by attribute and bisect. A variant that is the whole
stack is the recipe itself: its runs are stored under the recipe's own name. A meter with a `search`
key (a bisect's) hands out only the stored runs of its own campaign (toolkit.analysis.search_campaign):
a probe's runs from another campaign are named in `reused`, and the probe launches again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from toolkit.tree import gitrepo
from toolkit.analysis import sequential_design as designs
from toolkit.analysis.selection import Criteria, MissingResults, choose, values_at
from toolkit.errors import BadInput, PatchbenchError
from toolkit.results.metrics import MetricSpec  # noqa: F401  (re-exported: attribute/bisect parse with it)
from toolkit.run.quality import ANSWER_METRICS, EVERY_LAUNCH
from toolkit.recipe.load import Recipe
from toolkit.results.store import Store


def stack_of(recipe: Recipe) -> list[tuple[str, Path]]:
    """The recipe's patches across sources, in recipe order: [(source, patch path)]."""
    return [(src, p) for src in recipe.sources for p in recipe.patches.get(src, ())]


def patch_label(recipe: Recipe, path: Path) -> str:
    try:
        return str(path.relative_to(recipe.patches_dir))
    except ValueError:
        return path.name


def overrides_for(recipe: Recipe, chosen: list[tuple[str, Path]]) -> dict:
    """Overrides that give each source exactly the chosen patches (in stack order)."""
    return {src: {"stack": [p for s, p in chosen if s == src]} for src in recipe.sources}


def prefix_overrides(recipe: Recipe, k: int) -> dict:
    return overrides_for(recipe, stack_of(recipe)[:k])


def without_overrides(recipe: Recipe, i: int) -> dict:
    stack = stack_of(recipe)
    return overrides_for(recipe, stack[: i - 1] + stack[i:])


def upstream_commits(recipe: Recipe, source: str, good: str, bad: str, home: Path) -> list[str]:
    """[good, c1, ..., bad]: first-parent history of a git source between two revisions."""
    from toolkit.tree.sources import resolve_git

    spec = recipe.sources.get(source)
    if spec is None:
        raise BadInput(f"recipe {recipe.name} has no source `{source}`", hint=f"sources: {', '.join(recipe.sources)}")
    if spec.kind != "git":
        raise BadInput(f"source {source} is a {spec.kind} source; an upstream bisect needs a git source")
    import dataclasses

    mirror, good_sha = resolve_git(dataclasses.replace(spec, rev=good), home)
    _, bad_sha = resolve_git(dataclasses.replace(spec, rev=bad), home)
    commits = gitrepo.first_parent_commits(mirror, good_sha, bad_sha)
    if not commits:
        raise BadInput(f"source {source}: no commits between {good} and {bad} (is {good} an ancestor of {bad}?)")
    return [good_sha, *commits]


@dataclass
class VariantMeter:
    """Measures variants of one recipe for one metric at one point, caching per env key."""

    recipe: Recipe
    home: Path
    store: Store
    spec: MetricSpec
    console: Console
    group_id: str = ""
    builds: int = 0
    runs: int = 0
    _used: dict = field(default_factory=dict)  # env key -> run ids already handed out
    _prepared: dict = field(default_factory=dict)  # label -> Prepared | None
    skipped: dict = field(default_factory=dict)  # label -> why it has no values
    # label -> why each of its launches that gave no value failed, for a label with values (a top-up's crash:
    # its other values count; it is no skip)
    failed: dict = field(default_factory=dict)
    _gpu_key: str | None = None
    log: list = field(default_factory=list)  # (label, run identity, values, run ids) for the report
    launched: list = field(default_factory=list)  # run ids this meter launched (what the call cost)
    missing_evidence: bool = False  # runs stored invalid for missing activation evidence count too
    stored: dict = field(default_factory=dict)  # label -> values stored before its first measure (handed out first)
    answers_design: object | None = None  # toolkit.analysis.answers_sequential.Design: sequential answers
    # toolkit.analysis.sequential.Design the variants are launched under (attribute's steps, track --settle):
    # each run records it (`extra["sequential"]`), so compare and the report judge its pairs as it did
    design: object | None = None
    # a bisect's key (toolkit.analysis.search_campaign): its looks read only its own campaign's runs (this
    # sweep, or that of a killed or earlier call of the same search, which it continues); a probe's other
    # stored runs are left out (`reused`) and the probe launches again
    search: str = ""
    reused: dict = field(default_factory=dict)  # label -> stored run ids of another campaign, not values here
    joined: bool = False  # the sweep to continue was looked for (at the first measure)
    # run ids handed out already by the meter this one measures for (a Slurm node's job: the submitting
    # side's meter): a top-up never hands one out again
    handed: frozenset = frozenset()
    fresh: bool = False  # a search that continues no earlier sweep of itself (`bisect --fresh`)
    replay_of: str | None = None  # when the finished sweep this search replays finished (no launch in it)
    # a contextlib.ExitStack the sweep's lease is held on (as `run` holds its sweep's): one process at a time
    # launches into a sweep; None: none taken
    leases: object | None = None

    @property
    def point(self) -> int:
        if self.spec.point is not None:
            return self.spec.point
        b = self.recipe.benchmark
        return (b.concurrency if b.driver == "serving" else b.batch_sizes)[0]

    def _prepare(self, label: str, overrides: dict, recipe: Recipe | None = None, until: str = "store"):
        from toolkit.run.pipeline import prepare

        if label not in self._prepared:
            whole = recipe is None and overrides == overrides_for(self.recipe, stack_of(self.recipe))
            try:  # the whole stack is the recipe itself: its runs are the recipe's own
                p = prepare(recipe or self.recipe, self.home, overrides=overrides or None,
                            label=None if whole else f"{self.recipe.name}@{label}", console=self.console, until=until)
                p = designs.launched_under(p, self.design)
                if self.search:  # each run names the search that launched it: a later call of it continues it
                    import dataclasses

                    from toolkit.analysis.search_campaign import TAG

                    p = dataclasses.replace(p, extra={**p.extra, TAG: self.search})
                self._prepared[label] = p
                self.builds += 1
            except PatchbenchError as exc:
                self.console.print(f"[yellow]skip[/] {label}: {exc}")
                self.skipped[label] = str(exc)
                self._prepared[label] = None
        return self._prepared[label]

    @property
    def gpu_key(self) -> str:
        """The GPUs of this machine, as runs store them."""
        if self._gpu_key is None:
            from toolkit.run.machine import this_gpu_key

            self._gpu_key = this_gpu_key()
        return self._gpu_key

    def _values(self, run_ids: list[str]) -> list[float]:
        """One value per run (`selection.reduce`) of the metric at the point, in run order."""
        return values_at(self.store.samples(run_ids, metric=self.spec.metric), self.spec.metric, self.point, run_ids)

    def rule(self, identity: str) -> Criteria:
        """Which runs of a variant give values: the same for stored runs and new ones."""
        return Criteria(identity=identity, prefer_group=False, missing_evidence=self.missing_evidence,
                        broken_output=True)

    def counting(self, rows: list, identity: str) -> list[str]:
        """The runs among `rows` that count under `rule(identity)` (oldest first), whatever recipe
        label they carry."""
        name = self.recipe.name
        try:
            sel = choose([_as(r, name) for r in rows], [name], self.rule(identity),
                         measured=self.store.measured_metrics([r.run_id for r in rows]), metrics=[self.spec.metric])
        except MissingResults:
            return []
        return sel.run_ids(name)

    def cached(self, identity: str) -> list[str]:
        """Stored runs of this identity that count (oldest first), whatever recipe label they carry."""
        return self.counting(self.store.runs(identity=identity, status=["ok", "invalid"]), identity)

    def _answer_launches(self, label: str) -> int | None:
        """Launches of a variant that ask the output check: every one when the metric is one of its
        answers; two for the base of a stack ("prefix0", the reference meter_verdicts judges the
        prefixes against: its variation is their floor); else the recipe's rule."""
        if self.spec.metric in ANSWER_METRICS:
            return EVERY_LAUNCH
        if getattr(self.recipe.quality, "launches", None) == 0:  # the recipe turned the check off: no stack part asks it either
            return None
        return 2 if label == "prefix0" else None

    def _answer_rule(self, label: str, p, identity: str):
        """With sequential launches (`answers_design`), a prefix other than the base asks its answers only
        while its sequential answers verdict against the base (prefix0, the reference meter_verdicts
        judges it against) is unsettled (toolkit.analysis.answers_rule); None: `_answer_launches`."""
        base = self._prepared.get("prefix0")
        if self.answers_design is None or label == "prefix0" or self.spec.metric in ANSWER_METRICS or base is None:
            return None
        from toolkit.analysis import answers_rule
        from toolkit.run.identity import expected_identity

        base_key = expected_identity(base.recipe, base.env.key, self.gpu_key)
        return answers_rule.for_recipe(self.store, p, identity,
                                       lambda: self.store.runs(recipe=base.name, identity=base_key),
                                       self.answers_design)

    def ready(self, label: str, overrides: dict, recipe: Recipe | None = None) -> bool:
        """Prepare the variant (apply, build, static check) without launching it; False: it is a skip (why in
        `skipped`). A bisect asks it before launching a probe's reference just before the probe's first launch."""
        return self._prepare(label, overrides, recipe) is not None

    def measure(self, label: str, overrides: dict, repeats: int, recipe: Recipe | None = None) -> list[float] | None:
        """`repeats` values not handed out before for this env: stored ones first, then new runs.
        `recipe`: a variant recipe (another release) instead of overrides of this one."""
        from toolkit.run.identity import expected_identity
        from toolkit.run.pipeline import run_once

        p = self._prepare(label, overrides, recipe)
        if p is None:
            return None
        key = expected_identity(p.recipe, p.env.key, self.gpu_key)
        stored = self.cached(key)
        used = self._used.setdefault(key, set(stored) & self.handed)
        # oldest first: a replay hands out the same values in the same order, so it decides the same
        cached = [r for r in stored if r not in used]
        if self.search:
            cached = self._own(label, cached)
        if label not in self.stored:  # the sequential steps pool the spread of the stored ones a look does not use
            self.stored[label] = len(self._values(cached)) if cached else 0
        # a search hands its sweep's runs out in the order they were launched, a failed one where the first call
        # met it (`met`): a replayed or continued call then decides as that call did
        take, met = self._in_order(key, cached, used, repeats) if self.search else (cached[:repeats], None)
        values = self._values(take)
        used.update(take)
        ids = list(take)
        while len(values) < repeats:
            if met is not None:  # the failed launch the call that measured this sweep met here, met again
                run_id, met = met, None
            elif self.replay_of is not None:  # a finished sweep takes no launch: its failed launch fails again
                run_id = self._replayed_failure(label, key, used, len(values), repeats)
            else:
                run_id = run_once(p, home=self.home, store=self.store, repeat=len(used), group_id=self.group_id,
                                  console=self.console, answer_launches=self._answer_launches(label),
                                  answer_rule=self._answer_rule(label, p, key))
                self.runs += 1
                self.launched.append(run_id)
            used.add(run_id)
            ids.append(run_id)
            got = self._values(self.counting([self.store.get_run(run_id)], key))
            if not got:
                run = self.store.get_run(run_id)
                logs = run.log_paths or {}
                log = logs.get("server") or logs.get("run_dir")
                why = f"run {run_id[:8]} {run.status}: {run.error}" + (f" (log: {log})" if log else "")
                if not values and self._ids(label):  # a top-up of a measured variant: its earlier values count
                    self.console.print(f"[yellow]failed launch[/] {label}: {why} (its earlier values count)")
                    self.failed.setdefault(label, []).append(why)
                    return None
                self.console.print(f"[yellow]skip[/] {label}: {why}")
                if not values:
                    self.skipped[label] = why
                    return None
                ids.pop()  # the failed run gave no value
                break
            values.extend(got)
        self.record(label, key, values, ids)
        return values

    def _in_order(self, key: str, cached: list[str], used: set, repeats: int) -> tuple[list[str], str | None]:
        """Up to `repeats` of the sweep's runs of this identity not handed out yet (`cached`: those that give a
        value), in launch order, stopping at the first that gave none (a failed launch: returned second, to be
        met where the call that launched it met it, not after the later launches' values)."""
        counting, take = set(cached), []
        for r in self.store.runs(identity=key, group_id=self.group_id) if self.group_id else []:
            if len(take) >= repeats:
                break
            if r.run_id in used or r.status not in ("ok", "invalid", "failed"):  # interrupted: no call met it
                continue
            if r.run_id not in counting:
                return take, r.run_id
            take.append(r.run_id)
        return take + [r for r in cached if r not in take][:repeats - len(take)], None

    def _replayed_failure(self, label: str, key: str, used: set, have: int, want: int) -> str:
        """In the replay of a finished sweep, the next launch of this identity in it that gave no value (the
        crash the first call met, met again); none: search_campaign.NotReplayable."""
        from toolkit.analysis.search_campaign import NotReplayable

        for r in self.store.runs(identity=key, group_id=self.group_id):
            if r.run_id not in used and r.status in ("ok", "invalid", "failed"):
                return r.run_id
        raise NotReplayable(f"sweep {self.group_id} of this search (finished {self.replay_of[:16]}) holds {have} of "
                            f"the {want} value(s) {label} needs now (its configuration changed since, or its runs "
                            "are gone)")

    def _own(self, label: str, cached: list[str]) -> list[str]:
        """Of the stored runs `cached`, those of this search's campaign (toolkit.analysis.search_campaign);
        the others are named in `reused`. The first call decides the sweep (`_join`)."""
        from toolkit.analysis import search_campaign

        rows = self.store.runs(run_ids=cached) if cached else []
        order = {rid: i for i, rid in enumerate(cached)}
        rows.sort(key=lambda r: order[r.run_id])
        if not self.joined:
            self.joined = True
            self._join(rows)
        mine, other = search_campaign.split(rows, self.group_id)
        left = self.reused.setdefault(label, [])
        left.extend(r for r in other if r not in left)
        if not left:
            del self.reused[label]
        return mine

    def _join(self, rows: list) -> None:
        """Which sweep this search measures in (toolkit.analysis.search_campaign), from the first probe's
        stored runs `rows`: the newest sweep of the same search replayed when it finished, continued under
        its lease when it did not (a killed call; another process measuring it now: a new sweep), else
        this meter's own new sweep, under its lease."""
        from rich.markup import escape

        from toolkit.analysis import search_campaign

        group = None if self.fresh else search_campaign.resumed(rows, self.search)
        if group and group != self.group_id:
            done = search_campaign.finished(self.store.runs(group_id=group), group, self.search)
            if done is not None:
                self.group_id, self.replay_of = group, done
                self.console.print(f"[dim]replaying sweep {escape(group)} of this search, finished {escape(done[:16])}: "
                                   "its stored runs answer, nothing is launched (`--fresh` measures again in a new "
                                   "campaign)[/]")
                return
            if self.leases is None or self.leases.enter_context(self.store.lease(f"group-{group}")):
                self.group_id = group
                self.console.print(f"[dim]resuming sweep {escape(group)} of this search (not finished): its stored "
                                   f"runs count, new launches join it[/]")
                return
            self.console.print(f"[yellow]note[/]: sweep {escape(group)} of this search is being measured by another "
                               f"process now: this call measures in a new sweep {escape(self.group_id)}")
        if self.leases is not None:
            self.leases.enter_context(self.store.lease(f"group-{self.group_id}"))

    def finish(self) -> None:
        """The search is answered: its sweep is marked finished (search_campaign.DONE on its runs), so a
        later call of it replays the sweep and never launches into it."""
        from toolkit.analysis.search_campaign import DONE, TAG
        from toolkit.results.records import _now

        if not self.search or self.replay_of is not None:
            return
        at = _now()
        for r in self.store.runs(group_id=self.group_id):
            if (r.extra or {}).get(TAG) == self.search:
                self.store.add_samples(r.run_id, [], extra={**r.extra, DONE: at})

    def left_out_lines(self) -> dict[str, str]:
        """label -> what its looks left out (toolkit.analysis.campaigns.describe of its stored runs from
        another campaign, beside the runs handed out)."""
        from toolkit.analysis import campaigns

        out = {}
        for label, ids in self.reused.items():
            counted = self._ids(label)
            rows = {r.run_id: r for r in self.store.runs(run_ids=[*ids, *counted])}
            out[label] = campaigns.describe(label, [rows[i] for i in ids if i in rows],
                                            [rows[i] for i in counted if i in rows])
        return out

    def evidence(self) -> dict:
        """What each variant's values came from, as JSON: `probes` (label, run identity, values, run ids,
        in the order first measured), `skipped` (label -> why it has no values: the apply or build
        error, or the failed run with its log) and `failed_launches` (label -> why each launch of a variant
        that has values gave none: the failed run with its log)."""
        out = {"probes": [{"label": lab, "identity": key, "values": list(vals), "run_ids": list(ids)}
                          for lab, key, vals, ids in self.log],
               "skipped": dict(self.skipped), "failed_launches": {k: list(v) for k, v in self.failed.items()}}
        if self.search:  # a bisect's probes: the stored runs of another campaign its looks left out
            for probe in out["probes"]:
                probe["reused"] = list(self.reused.get(probe["label"], ()))
            out["left_out"] = self.left_out_lines()
            out["sweep"] = self.group_id
            out["replayed"] = self.replay_of  # when the finished sweep it replayed finished (None: measured now)
        return out

    def _ids(self, label: str) -> list[str]:
        """The run ids of the values handed out for `label`, in order."""
        return [rid for lab, _, _, ids in self.log if lab == label for rid in ids]

    def _split(self, a: str, b: str):
        from toolkit.analysis import campaigns

        ids_a, ids_b = self._ids(a), self._ids(b)
        rows = {r.run_id: r for r in self.store.runs(run_ids=[*ids_a, *ids_b])} if ids_a or ids_b else {}
        return campaigns.split([rows[i] for i in ids_a if i in rows], [rows[i] for i in ids_b if i in rows],
                               here=self.group_id or None), ids_a, ids_b, rows

    def together(self, a: str, b: str) -> tuple[list[bool], list[bool]]:
        """Masks over the values handed out for `a` and for `b`: launched in a campaign of both (a sweep
        that holds runs of both, or this meter's), toolkit.analysis.campaigns; the sequential steps judge
        only those."""
        sp, ids_a, ids_b, _ = self._split(a, b)
        return [i in set(sp.a) for i in ids_a], [i in set(sp.b) for i in ids_b]

    def judged(self, pairs) -> dict[str, tuple[list[str], list[str]]]:
        """label -> (the run ids of its values that a pair's verdict judged: launched in a campaign of both
        sides, toolkit.analysis.campaigns; those that none of its `pairs` judged), in order. A label in no
        pair keeps every run (nothing judged it against another campaign)."""
        keep: dict[str, set] = {}
        for a, b in pairs:
            sp, _, _, _ = self._split(a, b)
            keep.setdefault(a, set()).update(sp.a)
            keep.setdefault(b, set()).update(sp.b)
        out = {}
        for label, _, _, ids in self.log:
            kept = keep.get(label)
            out[label] = (list(ids), []) if kept is None else ([i for i in ids if i in kept],
                                                               [i for i in ids if i not in kept])
        return out

    def judged_lines(self, judged: dict) -> dict[str, str]:
        """label -> what no verdict of it judged (campaigns.describe of those runs beside the judged ones)."""
        from toolkit.analysis import campaigns

        out = {}
        for label, (kept, left) in judged.items():
            if left:
                rows = {r.run_id: r for r in self.store.runs(run_ids=[*kept, *left])}
                out[label] = campaigns.describe(label, [rows[i] for i in left if i in rows],
                                                [rows[i] for i in kept if i in rows])
        return out

    def left_out(self, a: str, b: str, names: tuple[str, str] | None = None) -> tuple[str, ...]:
        """What the pair's verdict left out (toolkit.analysis.campaigns.describe of each side's runs from
        another campaign), under `names` (default: the labels)."""
        from toolkit.analysis import campaigns

        sp, _, _, rows = self._split(a, b)
        na, nb = names or (a, b)
        return campaigns.left_out(na, nb, sp, rows)

    def record(self, label: str, key: str, values: list[float], ids: list[str]) -> None:
        """Log the values a measure call handed out; a later call for the same variant (more
        values: bisect's and the sequential steps' top-ups) extends its entry."""
        for i, (lab, k, vals, old) in enumerate(self.log):
            if lab == label and k == key:
                self.log[i] = (label, key, list(vals) + list(values), list(old) + list(ids))
                return
        self.log.append((label, key, list(values), ids))  # key: the run identity


def _as(run, recipe: str):
    """A stored run of any variant label, seen as a run of `recipe` (the env key says which variant)."""
    import dataclasses

    return run if run.recipe == recipe else dataclasses.replace(run, recipe=recipe)
