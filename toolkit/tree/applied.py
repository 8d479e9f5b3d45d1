"""Patched source trees: the AppliedTree value handed from apply to build, and how it is made."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from toolkit.digest import sha256_file
from toolkit.errors import BadInput
from toolkit.tree import gitrepo, lock as lockfile, patches as patchmod, sources
from toolkit.tree.patches import PatchInfo
from toolkit.recipe.spec import SourceSpec


@dataclass(frozen=True)
class AppliedTree:
    """A materialised source with its patch stack applied, one git commit per patch.

    `path` is a git work tree whose HEAD is `head_commit`; `patch_commits[i]` is the commit after
    patch i, so every prefix of the stack is addressable. `tree_hash` is `git rev-parse HEAD^{tree}`:
    the identity of the content, independent of commit metadata.
    """

    source: str  # upstream name in the recipe: "sglang", "flashinfer", ...
    path: Path
    base_commit: str
    head_commit: str
    tree_hash: str
    layout: str  # "git" (a git checkout/mirror), "path" (local dir), "sdist", "wheel"
    package_dir: str  # installable project relative to `path` ("python" for sglang git, "" otherwise)
    patch_commits: tuple[str, ...] = ()
    patches: tuple[str, ...] = ()  # patch file names, in stack order
    origin: dict = field(default_factory=dict)  # kind, location, rev, resolved, artifact sha256...

    @classmethod
    def at_head(cls, source: str, path: Path, *, layout: str = "git", package_dir: str = "") -> "AppliedTree":
        """A checkout taken as it is at HEAD, with no patch stack (benchmarks and tests)."""
        head = gitrepo.head(path)
        return cls(source=source, path=path, base_commit=head, head_commit=head,
                   tree_hash=gitrepo.tree_hash(path), layout=layout, package_dir=package_dir)

    @property
    def project_dir(self) -> Path:
        """The directory that holds pyproject.toml/setup.py (what `pip install` takes)."""
        return self.path / self.package_dir if self.package_dir else self.path

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "path": str(self.path),
            "base_commit": self.base_commit,
            "head_commit": self.head_commit,
            "tree_hash": self.tree_hash,
            "layout": self.layout,
            "package_dir": self.package_dir,
            "patch_commits": list(self.patch_commits),
            "patches": list(self.patches),
            "origin": dict(self.origin),
        }


# ------------------------------------------------------------------------------ materialisation
# recipe + source -> AppliedTree: resolve the base, vet the stack, build the tree in a temporary
# directory, commit one patch at a time, and publish it atomically under a content key.

_MARKER = "patchbench-tree.json"  # lives in .git/, so it is not part of the tree


@dataclass(frozen=True)
class Plan:
    """A source resolved and its stack vetted, before anything is written."""

    source: str
    spec: SourceSpec
    base: sources.Base
    handle: Path  # the git mirror, the path source's directory or the downloaded artifact
    patches: tuple[PatchInfo, ...]  # in order
    strip_prefix: str
    key: str

    @property
    def package_dir(self) -> str:
        return self.spec.package_dir if self.base.layout in ("git", "path") else ""


def plan_source(recipe, source: str, home: Path, *, refresh: bool = False, lock: dict | None = None,
                rev: str | None = None, stack: list[Path] | None = None, offline: bool = False) -> Plan:
    """Resolve one source and parse its patches. `rev`/`stack` override the recipe (bisect)."""
    spec = recipe.sources[source]
    if rev is not None:
        spec = dataclasses.replace(spec, rev=rev)
    lock_entry = (lock or {}).get("sources", {}).get(source)
    base, handle = sources.resolve_base(spec, home, refresh=refresh, lock_entry=lock_entry, offline=offline)
    paths = list(recipe.patches.get(source, ())) if stack is None else list(stack)
    infos = []
    for p in paths:
        try:
            name = str(p.relative_to(recipe.patches_dir))
        except ValueError:
            name = p.name
        infos.append(patchmod.parse_patch(p, name=name, allow_binary=recipe.allow_binary_patches))
    strip = spec.package_dir if base.layout in ("sdist", "wheel") else ""
    return Plan(source, spec, base, handle, tuple(infos), strip, _plan_key(base, strip, infos))


def _plan_key(base: sources.Base, strip: str, infos) -> str:
    return hashlib.sha256(
        json.dumps({"base": base.identity(), "strip": strip, "patches": [i.sha256 for i in infos]},
                   sort_keys=True).encode()
    ).hexdigest()


def plan_on_content(plan: Plan, resolved: str) -> Plan:
    """The same plan on another recorded state of its base (a path's content hash from a lock):
    its key finds the tree applied to that state, if the workspace still has it."""
    base = dataclasses.replace(plan.base, resolved=resolved)
    return dataclasses.replace(plan, base=base, key=_plan_key(base, plan.strip_prefix, plan.patches))


def base_plan(plan: Plan) -> Plan:
    """The same source with no patches: its tree is the base itself, published (and reused) like
    any other tree, e.g. by a recipe that patches nothing in that source."""
    return dataclasses.replace(plan, patches=(), key=_plan_key(plan.base, plan.strip_prefix, ()))


def _tree_dir(home: Path, plan: Plan, under: str = "trees") -> Path:
    return home / under / f"{plan.source}-{plan.key[:16]}"


def _read_marker(path: Path) -> dict | None:
    try:
        return json.loads((path / ".git" / _MARKER).read_text())
    except (OSError, ValueError):
        return None


def _to_tree(plan: Plan, path: Path, marker: dict) -> AppliedTree:
    return AppliedTree(
        source=plan.source,
        path=path,
        base_commit=marker["base_commit"],
        head_commit=marker["head_commit"],
        tree_hash=marker["tree_hash"],
        layout=plan.base.layout,
        package_dir=plan.package_dir,
        patch_commits=tuple(marker["patch_commits"]),
        patches=tuple(i.name for i in plan.patches),
        origin={**plan.base.identity(), "rev": plan.base.rev, "artifact": plan.base.artifact},
    )


def existing_tree(plan: Plan, home: Path, under: str = "trees") -> AppliedTree | None:
    """The published tree for this plan, if it is intact (HEAD and content as recorded)."""
    path = _tree_dir(home, plan, under)
    marker = _read_marker(path)
    if not marker:
        return None
    if gitrepo.rev_parse(path, "HEAD") != marker["head_commit"]:
        return None
    if not gitrepo.is_clean(path):
        return None
    return _to_tree(plan, path, marker)


def materialise(plan: Plan, home: Path, under: str = "trees") -> tuple[AppliedTree, bool]:
    """Return (tree, reused). Builds in a temp dir and renames into place; failures leave nothing.
    `under`: "trees" (what envs are built from) or "bases" (base trees kept for `check_plan`)."""
    final = _tree_dir(home, plan, under)
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        tree = existing_tree(plan, home, under)
        if tree is not None:
            return tree, True
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
        try:
            work = tmp / "tree"
            base = _known_base(plan, home) if plan.patches else None
            if base is not None:  # the same base commit, without unpacking and committing again
                gitrepo.run(None, "clone", "-q", str(base.path), str(work), what="git clone (base)")
                base_commit = base.head_commit
            else:
                base_commit = sources.materialise_base(plan.spec, plan.base, plan.handle, work)
            scratch = tmp / "mapped"
            scratch.mkdir()
            commits = [patchmod.apply_one(work, info, plan.strip_prefix, scratch) for info in plan.patches]
            marker = {
                "base_commit": base_commit,
                "head_commit": gitrepo.head(work),
                "tree_hash": gitrepo.tree_hash(work),
                "patch_commits": commits,
                "key": plan.key,
            }
            (work / ".git" / _MARKER).write_text(json.dumps(marker, indent=1))
            if final.exists():  # a damaged tree: replace it
                shutil.rmtree(final)
            os.rename(work, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return _to_tree(plan, final, marker), False


def check_plan(plan: Plan, home: Path) -> list:
    """Dispositions of the plan's stack against its base (`cached_base`), checked in a kept
    scratch clone of it, so no published tree changes and no call rebuilds or re-checks-out the
    base. An empty stack needs no tree at all."""
    if not plan.patches:
        return []
    base = cached_base(plan, home)
    clone = _check_clone(base, home)
    with FileLock(str(clone) + ".lock"):
        gitrepo.run(clone, "reset", "-q", "--hard", base.head_commit, what="git reset (check)")
        gitrepo.run(clone, "clean", "-q", "-f", "-d", "-x", what="git clean (check)")
        return patchmod.check_in(clone, list(plan.patches), plan.strip_prefix)


def cached_base(plan: Plan, home: Path) -> AppliedTree:
    """The plan's base as a tree: the published unpatched tree when a recipe built one, else
    `home/bases/<source>-<key16>`, made on first use and reused after."""
    bare = base_plan(plan)
    return existing_tree(bare, home) or materialise(bare, home, under="bases")[0]


def _known_base(plan: Plan, home: Path) -> AppliedTree | None:
    """The plan's base tree if one is already published (by a recipe, or for checks)."""
    bare = base_plan(plan)
    return existing_tree(bare, home) or existing_tree(bare, home, under="bases")


def _check_clone(base: AppliedTree, home: Path) -> Path:
    """A scratch clone of a base tree kept for checks (`home/bases/<name>.check`): cloned once,
    then only reset to the base commit, which rewrites just the files the last check changed."""
    path = home / "bases" / f"{base.path.name}.check"
    with FileLock(str(path) + ".lock"):
        usable = (path / ".git").is_dir() and gitrepo.run(
            path, "cat-file", "-e", f"{base.head_commit}^{{commit}}", check=False).returncode == 0
        if not usable:
            shutil.rmtree(path, ignore_errors=True)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            gitrepo.run(None, "clone", "-q", str(base.path), str(tmp), what="git clone (check)")
            os.rename(tmp, path)
    return path


def require_sources(recipe) -> None:
    """BadInput for a recipe without [sources] (an empty file, or one that forgot its `extends`): it has no
    sglang to apply, build or launch (its env would build empty and fail at the check, "No module named
    'sglang'")."""
    if not recipe.sources:
        raise BadInput(f"no [sources] in {recipe.path}: nothing to apply, build or launch",
                       hint='did you forget `extends = "demo/baseline"` (or a [sources.sglang] table)?')


def matrix_patches(recipe) -> dict[str, list[dict]]:
    """source -> the patches its [matrix] `patches.SOURCE` axes add to the recipe's own stack, with their
    sha256: the lock records them, so `sweep --frozen` can hold each variant's stack to the lock."""
    from toolkit.recipe.load import expand_recipe
    from toolkit.recipe.values import rel_name

    out: dict[str, dict[str, str]] = {}
    for v in expand_recipe(recipe) if recipe.raw.get("matrix") else ():
        for src, paths in v.patches.items():
            own = set(recipe.patches.get(src, ()))
            for path in paths:
                if path not in own and path.is_file():
                    out.setdefault(src, {})[rel_name(path, recipe.patches_dir)] = sha256_file(path)
    return {src: [{"name": n, "sha256": h} for n, h in sorted(found.items())] for src, found in out.items()}


def apply_recipe(recipe, home: Path, *, frozen: bool = False, refresh: bool = False,
                 overrides: dict | None = None, write_lock: bool = True,
                 offline: bool = False) -> list[tuple[AppliedTree, bool]]:
    """Every source of the recipe as an AppliedTree. Plans (and vets) all sources first.

    overrides: {source: {"rev": REV, "stack": [patch paths]}} for prefix/upstream variants; a
    variant (these, or a [matrix] variant `NAME[k=v,...]`, which shares NAME's file) never writes
    the recipe's lock: it describes the recipe's own sources and patch stack.
    """
    from toolkit.recipe.matrix import split_variant

    require_sources(recipe)
    overrides = overrides or {}
    lock = lockfile.read_lock(recipe.lock_path)
    plans = []
    for name in recipe.sources:
        o = overrides.get(name, {})
        plans.append(plan_source(recipe, name, home, refresh=refresh, lock=lock, rev=o.get("rev"),
                                 stack=o.get("stack"), offline=offline))
    entries = {p.source: lockfile.source_entry(p.base, list(p.patches), None) for p in plans}
    if frozen:  # a [matrix] variant (its patch sets appended to the recipe's stack): patches the lock records
        variant = split_variant(recipe.name)[1] is not None
        for name, entry in entries.items():
            if variant:
                lockfile.check_frozen_variant(lock, recipe.lock_path, name, entry, recipe.name)
            else:
                lockfile.check_frozen(lock, recipe.lock_path, name, entry)
    results = [materialise(p, home) for p in plans]
    if write_lock and not overrides and not frozen and split_variant(recipe.name)[1] is None:
        for tree, _ in results:
            entries[tree.source]["tree_hash"] = tree.tree_hash
        for name, extra in matrix_patches(recipe).items():  # what `sweep --frozen` holds [matrix] variants to
            entries[name]["matrix_patches"] = extra
        lockfile.write_lock(recipe.lock_path, recipe.name, entries)
    return results
