"""What a verdict cost in GPU minutes, and what the fixed design would have (pure: stored runs in).

A launch costs its launch-to-ready plus benchmark seconds (`launch_cost.launch_seconds`) times the
GPUs it held, read from the run's own resolved recipe (`[server] gpus = 0`: none; else tp x pp x dp
by `launch_cost.gpus_of`), so a table of stored runs needs no recipe file. A pair's verdict used:

    sequential   the first settled look of each point (n launches each: the first n runs of each
                 side, oldest first); the pair's cost is that of its slowest point's look, since
                 one launch measures every point
    fixed        every run of both sides

and the fixed design would have launched each side's `[benchmark] repeats` (as stored with its
runs), at the mean launch time of that side's runs. A recipe's line (`recipe_cost`) counts every
launch of the configuration the verdicts read (its run identity) and of the sweeps they came from,
said apart: used (in the selection's campaign), reused (used, from another campaign), left out
(stored, not used: a launched pair's runs of one side from another campaign too, as its verdicts), failed, interrupted, running; `results` (no verdict: stored, failed,
interrupted), `results --selected`, `compare` and `report` print these same lines (`of_selection`;
`launches_of` is this module's one store read); `run` prints what its own launches cost
(`launch_cost.cost`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from toolkit.analysis.launch_cost import gpus_of, launch_seconds
from toolkit.results.records import RunRow

DEFAULT_REPEATS = 3  # toolkit.recipe.spec.BenchSpec.repeats, for a run stored without its [benchmark] repeats


def run_gpus(run: RunRow) -> int:
    """The GPUs one stored run held: none for `[server] gpus = 0`, else its server args' layout."""
    server = (run.recipe_resolved or {}).get("server") or {}
    if server.get("gpus") == 0:
        return 0
    return gpus_of(server.get("args") or {})


@dataclass(frozen=True)
class Spend:
    """Launches, their seconds and GPU minutes."""

    launches: int
    seconds: float
    gpu_minutes: float
    stopped: int = 0  # of the launches, those interrupted or failed: their seconds up to the stop are counted

    def held(self) -> str:
        return f"{self.seconds:.0f} s" if self.seconds < 60 else f"{self.seconds / 60:.1f} min"

    def text(self) -> str:
        gpu = f"{self.gpu_minutes:.2f} GPU-min" if self.gpu_minutes else ("no GPU" if self.seconds else "no time recorded")
        held = self.held()
        stopped = f" ({self.stopped} stopped before the end: interrupted or failed)" if self.stopped else ""
        return f"{self.launches} launches{stopped}, {held}, {gpu}"


def spend(runs: Sequence[RunRow]) -> Spend:
    return Spend(len(runs), sum(launch_seconds(r) for r in runs),
                 sum(launch_seconds(r) * run_gpus(r) for r in runs) / 60.0,
                 sum(r.status in ("interrupted", "failed") for r in runs))


def fixed_spend(runs: Sequence[RunRow]) -> Spend:
    """The fixed design for one side: its `[benchmark] repeats` launches at the mean time of `runs`."""
    if not runs:
        return Spend(0, 0.0, 0.0)
    newest = runs[-1]
    repeats = int((((newest.recipe_resolved or {}).get("benchmark") or {}).get("repeats")) or DEFAULT_REPEATS)
    mean = sum(launch_seconds(r) for r in runs) / len(runs)
    return Spend(repeats, repeats * mean, repeats * mean * run_gpus(newest) / 60.0)


@dataclass(frozen=True)
class PairCost:
    baseline: str
    recipe: str
    metric: str
    each: int | None  # a sequential verdict's launches each (its slowest point's first settled look); None: fixed
    used: Spend  # the launches the verdicts used
    fixed: Spend  # what the fixed design would have launched
    cap: int | None = None  # the sequential design's max_repeats the pair was launched under

    def text(self) -> str:
        cap = f" up to {self.cap} each" if self.cap else ""
        how = (f"sequential{cap}, every point's verdict by {self.each} launches each" if self.each is not None
               else "the fixed rule, every run")
        ratio = f": {self.used.seconds / self.fixed.seconds:.2f}x its time" if self.fixed.seconds else ""
        return (f"{self.recipe} vs {self.baseline} ({self.metric}): {self.used.text()} ({how}); the fixed design "
                f"(each side's [benchmark] repeats): ~{self.fixed.text()}{ratio}")

    def to_dict(self) -> dict:
        return {"baseline": self.baseline, "recipe": self.recipe, "metric": self.metric, "launches_each": self.each,
                "max_repeats": self.cap,
                "launches": self.used.launches, "seconds": round(self.used.seconds, 1),
                "gpu_minutes": round(self.used.gpu_minutes, 3), "fixed_launches": self.fixed.launches,
                "fixed_seconds": round(self.fixed.seconds, 1), "fixed_gpu_minutes": round(self.fixed.gpu_minutes, 3)}


def pair_costs(rows: Sequence, runs: Mapping[str, RunRow], headline: Sequence[str],
               pairs: Mapping[tuple[str, str], tuple[Sequence[str], Sequence[str]]] | None = None) -> list[PairCost]:
    """One PairCost per (baseline, variant) of compare rows (`toolkit.analysis.compare.CompareRow`),
    from the rows of its first headline metric measured (`headline`: names by rank); `runs`: run id
    -> RunRow for every run named; `pairs`: (baseline, variant) -> every run id of each side (the
    selection's; else the rows'). A pair launched until settled (its rows' `launched_under`) cost the
    launches up to its slowest point's deciding look; any other, every run of the pair."""
    out = []
    for pair in dict.fromkeys((r.baseline, r.recipe) for r in rows):
        mine = [r for r in rows if (r.baseline, r.recipe) == pair]
        metric = next((m for m in headline if any(r.metric == m for r in mine)), mine[0].metric)
        mine = [r for r in mine if r.metric == metric]
        sequential = all(getattr(r, "launched_under", None) and getattr(r, "launches_each", None) for r in mine)
        each = max(r.launches_each for r in mine) if sequential else None
        ids_a, ids_b = (pairs or {}).get(pair) or ([i for r in mine for i in r.base_runs], [i for r in mine for i in r.variant_runs])
        all_base = [runs[i] for i in dict.fromkeys(ids_a) if i in runs]
        all_var = [runs[i] for i in dict.fromkeys(ids_b) if i in runs]
        base, var = (all_base[:each], all_var[:each]) if each is not None else (all_base, all_var)
        fb, fv = fixed_spend(all_base), fixed_spend(all_var)
        caps = {(getattr(r, "launched_under", None) or {}).get("max_repeats") for r in mine} if sequential else set()
        out.append(PairCost(pair[0], pair[1], metric, each, spend(base + var),
                            Spend(fb.launches + fv.launches, fb.seconds + fv.seconds, fb.gpu_minutes + fv.gpu_minutes),
                            caps.pop() if len(caps) == 1 else None))
    return out


KINDS = ("used", "reused", "left out", "stored", "failed", "interrupted", "running")


def kind_of(run: RunRow, used: set | None = None, campaign: str | None = None) -> str:
    """What a launch was to the verdicts: failed, interrupted or running (its display status) whatever they
    read; else, with `used` (the run ids they read), used (of `campaign`, the selection's sweep, or any when
    None), reused (used, from another sweep) or left out; without (`results`: no verdict), stored."""
    status = run.display_status()
    if status in ("failed", "interrupted"):
        return status
    if status.startswith("running"):
        return "running"
    if used is None:
        return "stored"
    if run.run_id not in used:
        return "left out"
    return "used" if campaign is None or run.group_id == campaign else "reused"


@dataclass(frozen=True)
class RecipeCost:
    """Every launch of one recipe counted, and its parts by kind (KINDS order)."""

    recipe: str
    total: Spend
    parts: tuple[tuple[str, Spend], ...]

    def text(self) -> str:
        """"demo/baseline: 3 launches, 22 s, no GPU: used 2 (19 s), failed 1 (3 s)"."""
        parts = ", ".join(f"{k} {s.launches} ({s.held()}" + (f", {s.gpu_minutes:.2f} GPU-min" if s.gpu_minutes else "")
                          + ")" for k, s in self.parts)
        return f"{self.recipe}: {self.total.text()}" + (f": {parts}" if parts else "")

    def to_dict(self) -> dict:
        def one(s: Spend) -> dict:
            return {"launches": s.launches, "seconds": round(s.seconds, 1), "gpu_minutes": round(s.gpu_minutes, 3)}

        return {**one(self.total), **{k: one(s) for k, s in self.parts}}


def recipe_cost(name: str, runs: Sequence[RunRow], used: set | None = None, campaign: str | None = None) -> RecipeCost:
    """Every launch in `runs` of recipe `name`, by kind (kind_of)."""
    by_kind: dict[str, list[RunRow]] = {}
    for r in runs:
        by_kind.setdefault(kind_of(r, used, campaign), []).append(r)
    total = spend(list(runs))
    return RecipeCost(name, Spend(total.launches, total.seconds, total.gpu_minutes),
                      tuple((k, spend(by_kind[k])) for k in KINDS if k in by_kind))


def recipe_lines(runs_by_recipe: Mapping[str, Sequence[RunRow]], used: set | None = None,
                 campaign: str | None = None) -> list[str]:
    """One RecipeCost line per recipe of the runs given (used/campaign: kind_of)."""
    return [recipe_cost(name, list(rs), used, campaign).text() for name, rs in runs_by_recipe.items() if rs]


def launches_of(store, sel) -> dict[str, list[RunRow]]:
    """recipe -> every stored launch, any status, oldest first, of the run identity the selection `sel` reads
    for it and of the sweeps its runs came from: its failed and interrupted launches, and the stored runs
    the verdicts left out, beside those they used."""
    out = {}
    for name in sel.recipes:
        mine = [*sel.runs[name], *sel.sequences.get(name, ())]
        idents = sorted({r.identity for r in mine if r.identity})
        groups = {r.group_id for r in mine if r.group_id}
        rows = {r.run_id: r for r in store.runs(recipe=name, identity=idents, limit=None)} if idents else {}
        for group in sorted(groups):  # the store filters: a recipe's whole history is not read to find them
            rows.update({r.run_id: r for r in store.runs(recipe=name, group_id=group, limit=None)})
        rows.update({r.run_id: r for r in mine})
        out[name] = sorted(rows.values(), key=lambda r: (r.started_at or "", r.run_id))
    return out


def title(runs: Sequence[RunRow]) -> str:
    """The heading of a cost section: GPU minutes only where a run held a GPU (`[server] gpus = 0` holds none)."""
    return "Cost (GPU minutes)" if any(run_gpus(r) for r in runs) else "Cost (launch time; no GPU held)"


LEGEND = ("cost: launch to ready + benchmark (and the checks in the same launch) x the GPUs a launch held "
          "(tp x pp x dp; none for [server] gpus = 0), from each run's stored timings")


def of_selection(store, sel, rows: Sequence) -> tuple[list[RecipeCost], list[PairCost]]:
    """(each recipe's RecipeCost over every launch of its configuration and sweeps, `launches_of`, said
    apart by what the verdicts made of it; each pair's PairCost) for a selection
    (`toolkit.analysis.selection.Selection`) and its compare rows: the cost lines of `results --selected`,
    `compare` and `report` alike."""
    per_recipe, pairs, _ = _costs(store, sel, rows)
    return per_recipe, pairs


def _costs(store, sel, rows: Sequence) -> tuple[list[RecipeCost], list[PairCost], list[RunRow]]:
    """of_selection's two lists, and every launch they count (the runs a cost heading is titled by)."""
    from toolkit.results.metrics import throughput_headline

    by_id = {r.run_id: r for rs in [*sel.runs.values(), *sel.sequences.values()] for r in rs}
    pairs, left = together({(r.baseline, r.recipe): sel.pair(r.baseline, r.recipe) for r in rows}, sel, by_id)
    used = {r.run_id for name in sel.recipes for r in sel.runs[name]} - left  # the runs the selection lists ("runs used")
    used |= {i for ids in pairs.values() for side in ids for i in side}
    launched = launches_of(store, sel)
    counted = [r for name in sel.recipes for r in launched[name]]
    return ([recipe_cost(name, launched[name], used, sel.group_id) for name in sel.recipes],
            pair_costs(rows, by_id, throughput_headline(), pairs), counted)


def together(pairs: Mapping, sel, by_id: Mapping[str, RunRow]) -> tuple[dict, set]:
    """(pairs with a launched pair's sides cut to the runs made in a campaign of both, as its verdicts read
    them: toolkit.analysis.compare.launched_together; the run ids so left out of every pair). A stored
    run of one side from another campaign is no launch its verdicts used: not "used"/"reused", nor
    among the first launches a sequential verdict's cost counts."""
    from toolkit.analysis import campaigns

    out, left, kept = {}, set(), set()
    for (a, b), (ids_a, ids_b) in pairs.items():
        if sel.launched_under(a, b) is not None:
            sp = campaigns.split([by_id[i] for i in ids_a if i in by_id], [by_id[i] for i in ids_b if i in by_id])
            if sp.a and sp.b:  # sides that share no campaign: the rows read all (and claim no faster/slower)
                left |= {*sp.reused_a, *sp.reused_b}
                ids_a, ids_b = list(sp.a), list(sp.b)
        out[(a, b)] = (ids_a, ids_b)
        kept |= {*ids_a, *ids_b}
    return out, left - kept


def lines_of(store, sel, rows: Sequence) -> list[str]:
    """The cost lines of a selection (of_selection): one per recipe, one per pair."""
    return section(store, sel, rows)[1]


def section(store, sel, rows: Sequence) -> tuple[str, list[str]]:
    """(the heading, the cost lines) of a selection: the heading is titled by the launches the lines count
    (every launch of the configurations and sweeps, `launches_of`, not only the runs used), so a section
    whose lines count GPU minutes is never headed "no GPU held"."""
    per_recipe, pairs, counted = _costs(store, sel, rows)
    return title(counted), [*(c.text() for c in per_recipe), *(p.text() for p in pairs)]
