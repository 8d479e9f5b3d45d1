"""Variants of a recipe (a prefix of its patch stack, the stack minus one patch, another upstream
commit) measured through the normal pipeline, with results cached per env key in the store.

This is the effectful edge that `attribute` and `bisect` (pure) measure through: a variant is
prepared (apply -> build -> static check); an apply or build failure is a *skip* (None), as
`git bisect run`'s exit 125. Values already stored for the same env key and benchmark are reused,
so a bisect can be resumed or replayed without measuring again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from toolkit import gitcmd
from toolkit.errors import BadInput, PatchbenchError
from toolkit.recipe import Recipe
from toolkit.store import Store


@dataclass(frozen=True)
class MetricSpec:
    metric: str
    point: int | None  # None: the benchmark's first point

    @classmethod
    def parse(cls, text: str) -> "MetricSpec":
        m = re.fullmatch(r"([A-Za-z0-9_]+)(?:@(\d+))?", text.strip())
        if not m:
            raise BadInput(f"--metric `{text}` is not NAME or NAME@POINT (e.g. output_tok_s@1)")
        return cls(m.group(1), int(m.group(2)) if m.group(2) else None)


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
    from toolkit.sources import resolve_git

    spec = recipe.sources.get(source)
    if spec is None:
        raise BadInput(f"recipe {recipe.name} has no source `{source}`", hint=f"sources: {', '.join(recipe.sources)}")
    if spec.kind != "git":
        raise BadInput(f"source {source} is a {spec.kind} source; an upstream bisect needs a git source")
    import dataclasses

    mirror, good_sha = resolve_git(dataclasses.replace(spec, rev=good), home)
    _, bad_sha = resolve_git(dataclasses.replace(spec, rev=bad), home)
    proc = gitcmd.git(mirror, "rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}", check=False)
    commits = proc.stdout.split()
    if proc.returncode != 0 or not commits:
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
    log: list = field(default_factory=list)  # (label, env key, values) for the report

    @property
    def point(self) -> int:
        if self.spec.point is not None:
            return self.spec.point
        b = self.recipe.benchmark
        return (b.concurrency if b.driver == "serving" else b.batch_sizes)[0]

    def _prepare(self, label: str, overrides: dict):
        from toolkit.pipeline import prepare

        if label not in self._prepared:
            try:
                self._prepared[label] = prepare(self.recipe, self.home, overrides=overrides,
                                                label=f"{self.recipe.name}@{label}", console=self.console)
                self.builds += 1
            except PatchbenchError as exc:
                self.console.print(f"[yellow]skip[/] {label}: {exc}")
                self._prepared[label] = None
        return self._prepared[label]

    def _values(self, run_ids: list[str]) -> list[float]:
        by_run: dict[str, float] = {}
        for s in self.store.samples(run_ids, metric=self.spec.metric):
            if s.point == self.point:
                by_run[s.run_id] = s.value
        return [by_run[r] for r in run_ids if r in by_run]

    def measure(self, label: str, overrides: dict, repeats: int) -> list[float] | None:
        """`repeats` values not handed out before for this env: stored ones first, then new runs."""
        from toolkit.pipeline import run_once
        from toolkit.store import bench_key

        p = self._prepare(label, overrides)
        if p is None:
            return None
        key = p.env.key
        used = self._used.setdefault(key, set())
        bk = bench_key(self.recipe.benchmark.driver, self.recipe.benchmark.params())
        cached = [r.run_id for r in self.store.runs(env_key=key, status="ok", bench_key=bk)
                  if r.run_id not in used and r.config_verified]
        take = cached[:repeats]
        values = self._values(take)
        used.update(take)
        while len(values) < repeats:
            run_id = run_once(p, home=self.home, store=self.store, repeat=len(used), group_id=self.group_id,
                              console=self.console)
            self.runs += 1
            used.add(run_id)
            got = self._values([run_id])
            if not got:
                run = self.store.get_run(run_id)
                self.console.print(f"[yellow]skip[/] {label}: run {run_id[:8]} {run.status}: {run.error}")
                return None if not values else values
            values.extend(got)
        self.log.append((label, key, list(values)))
        return values
