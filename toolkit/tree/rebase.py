"""`patchbench patches rebase RECIPE --onto REV|VERSION`: port a patch stack to another base.

The applied stack (one commit per patch) is cherry-picked onto the new base tree, one patch at a
time, with git's 3-way merge: a patch whose context moved still lands (reported as "3-way merged"),
and a real conflict stops with the hunk, the lines on each side and the commands to go on:

    edit the files, `git add` them, then  patchbench patches rebase RECIPE --onto V --continue
    or give up with                       patchbench patches rebase RECIPE --onto V --abort

When every patch is in, the refreshed patches are written to `patches/<folder>-<V>/` with a new
recipe `recipes/<RECIPE>-<V>.toml` (the resolved recipe on the new base, standalone), or over the
old patches and the recipe's own source pin with `--in-place`. The new recipe's lock is written.

A `path` source has one state, its current content (`--onto HEAD`, `.` or the path itself): the
old stack is the tree patchbench applied to the content the lock recorded (kept in the workspace's
tree cache), cherry-picked onto the path as it is now with the same conflict flow, and the patches
are rewritten in place (the recipe keeps its path).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from toolkit.tree import gitrepo
from toolkit.errors import BadInput, PatchbenchError
from toolkit.recipe.load import Recipe, load_recipe
from toolkit.tree.stack import Work, commits_of, other_users, patch_text, tree_of, pick_source, work_dir
from toolkit.tree.applied import AppliedTree, existing_tree, materialise, plan_on_content, plan_source


class RebaseConflict(PatchbenchError):
    """A patch does not merge onto the new base; the work tree is left for the user to resolve."""


@dataclass
class RebaseResult:
    recipe: str  # the recipe holding the rebased stack
    patches: list[tuple[str, str]]  # (patch name, "applies" | "3-way merged" | "resolved")
    work: Path


def _project(location: str) -> str:
    return re.split(r"[=<>!~ ]", location, maxsplit=1)[0]


def _on_new_base(recipe: Recipe, source: str, onto: str) -> Recipe:
    spec = recipe.sources[source]
    if spec.kind == "pypi":
        new = dataclasses.replace(spec, location=f"{_project(spec.location)}=={onto}", sha256=None)
    elif spec.kind == "git":
        new = dataclasses.replace(spec, rev=onto)
    else:  # a path: its current content is the new base
        if onto not in PATH_NOW and Path(onto).resolve() != Path(spec.location).resolve():
            raise BadInput(f"source {source} is the local path {spec.location}: its one new state is its current "
                           f"content, not {onto!r}", hint="--onto HEAD (the path as it is now)")
        return recipe
    return dataclasses.replace(recipe, sources={**recipe.sources, source: new})


PATH_NOW = ("HEAD", ".", "current")  # --onto for a path source: the path as it is now


def _old_path_tree(recipe: Recipe, source: str, home: Path) -> AppliedTree:
    """The stack as patchbench applied it to the path's content the lock recorded (the tree cache
    keeps it), for a path whose content has changed since."""
    try:
        entry = json.loads(recipe.lock_path.read_text())["sources"][source]
    except (OSError, ValueError, KeyError):
        raise BadInput(f"recipe {recipe.name}: no lock entry for {source}: nothing records the content the "
                       "patches were written for", hint="fix the .patch files by hand, or re-create the stack "
                       "with `patchbench patches edit`") from None
    tree = existing_tree(plan_on_content(plan_source(recipe, source, home), entry["resolved"]), home)
    if tree is None:
        raise BadInput(f"recipe {recipe.name}: the stack on the old content of {spec_path(recipe, source)} "
                       f"(content {entry['resolved'][:12]}) is not in this workspace's tree cache",
                       hint="rebase in the workspace that applied it before the path changed, or fix the .patch "
                            "files by hand")
    return tree


def spec_path(recipe: Recipe, source: str) -> str:
    return recipe.sources[source].location


def _rebase_dir(home: Path, recipe: Recipe, source: str, onto: str) -> Path:
    return work_dir(home, recipe, source).with_name(f"{source}-onto-{re.sub(r'[^A-Za-z0-9._-]', '_', onto)}")


def start(recipe: Recipe, source: str | None, onto: str, home: Path, *, in_place: bool = False,
          name: str | None = None) -> RebaseResult:
    source = pick_source(recipe, source)
    if not recipe.patches.get(source):
        raise BadInput(f"recipe {recipe.name} has no patches for {source} to rebase")
    dest = _rebase_dir(home, recipe, source, onto)
    if dest.exists():
        raise BadInput(f"a rebase of {recipe.name} onto {onto} is in progress in {dest}",
                       hint=f"patchbench patches rebase {recipe.name} --onto {onto} --continue (or --abort)")
    is_path = recipe.sources[source].kind == "path"
    target = _on_new_base(recipe, source, onto)
    old = _old_path_tree(recipe, source, home) if is_path else tree_of(recipe, source, home)
    in_place = in_place or is_path  # a path keeps its location: the patches are rewritten where they are
    if in_place:  # before any conflict work: the patches another recipe lists cannot be rewritten here
        refuse_shared(recipe, source, list(recipe.patch_names(source)), recipe.patches_dir.parent / "recipes")
    base, _ = materialise(plan_source(target, source, home, stack=[]), home)
    if base.layout != old.layout:
        raise BadInput(f"{source}: the old base is a {old.layout} tree and {onto} a {base.layout} tree; "
                       "rebase between bases of one kind")
    dest.parent.mkdir(parents=True, exist_ok=True)
    gitrepo.run(None, "clone", "-q", "--no-hardlinks", str(base.path), str(dest), what="git clone (rebase)")
    gitrepo.run(dest, "checkout", "-q", "-B", "patchbench-rebase", base.head_commit, what="git checkout")
    gitrepo.run(dest, "fetch", "-q", str(old.path), old.head_commit, what="git fetch (the old stack)")
    prefix = f"{recipe.sources[source].package_dir}/" if base.layout in ("sdist", "wheel") and recipe.sources[source].package_dir else ""
    work = Work(recipe.name, str(recipe.path), source, dest, base.head_commit, prefix,
                rebase={"onto": onto, "todo": list(old.patch_commits), "names": list(old.patches),
                        "how": [], "in_place": in_place, "name": name})
    work.save()
    return _run(work, recipe, home)


def _applies_cleanly(work: Work, patch_file: Path) -> bool:
    """Whether the patch as written applies to the current head with zero fuzz (no merge needed)."""
    strip = 1 + (len(work.prefix.strip("/").split("/")) if work.prefix else 0)
    return gitrepo.run(work.path, "apply", "--check", f"-p{strip}", str(patch_file), check=False).returncode == 0


def _run(work: Work, recipe: Recipe, home: Path) -> RebaseResult:
    state = work.rebase
    while state["todo"]:
        commit = state["todo"][0]
        name = state["names"][len(state["how"])]
        clean = _applies_cleanly(work, recipe.patches_dir / name)
        proc = gitrepo.run(work.path, "cherry-pick", "--allow-empty", "--keep-redundant-commits", commit, check=False)
        if proc.returncode != 0:
            work.save()
            raise RebaseConflict(_conflict_report(work, name), recipe=recipe.name, step="patches rebase",
                                 hint=f"resolve in {work.path}, `git add` the files, then `patchbench patches rebase "
                                      f"{recipe.name} --onto {state['onto']} --continue` (or `--abort`)")
        state["todo"].pop(0)
        state["how"].append("applies" if clean else "3-way merged")
        work.save()
    return _finish(work, recipe, home)


def resume(recipe: Recipe, source: str | None, onto: str, home: Path, *, abort: bool = False) -> RebaseResult | None:
    source = pick_source(recipe, source)
    dest = _rebase_dir(home, recipe, source, onto)
    if not dest.exists():
        raise BadInput(f"no rebase of {recipe.name} onto {onto} in progress")
    work = Work.load(dest)
    if abort:
        gitrepo.run(dest, "cherry-pick", "--abort", check=False)
        shutil.rmtree(dest)
        return None
    unmerged = gitrepo.out(dest, "diff", "--name-only", "--diff-filter=U")
    if unmerged:
        raise RebaseConflict(f"still unmerged in {dest}: {', '.join(unmerged.split())}", recipe=recipe.name,
                             step="patches rebase", hint="edit them, `git add` them, and --continue again")
    if gitrepo.run(dest, "rev-parse", "-q", "--verify", "CHERRY_PICK_HEAD", check=False).returncode == 0:
        gitrepo.run(dest, "commit", "-q", "--no-edit", "--no-verify", what="git commit (the resolved patch)")
        work.rebase["todo"].pop(0)
        work.rebase["how"].append("resolved")
        work.save()
    return _run(work, recipe, home)


def _conflict_report(work: Work, name: str) -> str:
    files = gitrepo.out(work.path, "diff", "--name-only", "--diff-filter=U").split()
    lines = [f"patch {name} does not merge onto {work.rebase['onto']}: conflict in {', '.join(files) or '?'}"]
    for f in files[:1]:
        text = (work.path / f).read_text(errors="replace").splitlines()
        try:
            a = next(i for i, ln in enumerate(text) if ln.startswith("<<<<<<<"))
            m = next(i for i in range(a, len(text)) if text[i].startswith("======="))
            b = next(i for i in range(m, len(text)) if text[i].startswith(">>>>>>>"))
        except StopIteration:
            continue
        lines.append(f"at {f}:{a + 1}: the new base has {' | '.join(x.strip() for x in text[a + 1:m]) or '(nothing)'}; "
                     f"the patch wants {' | '.join(x.strip() for x in text[m + 1:b]) or '(nothing)'}")
    return "; ".join(lines)


def _relative(value: str, new_dir: Path) -> str:
    return os.path.relpath(value, new_dir) if os.path.isabs(value) else value


def _finish(work: Work, recipe: Recipe, home: Path) -> RebaseResult:
    state = work.rebase
    commits = commits_of(work)
    onto, names = state["onto"], state["names"]
    if state["in_place"]:
        new_names = names
    else:
        new_names = [f"{n.rsplit('/', 1)[0]}-{onto}/{n.rsplit('/', 1)[-1]}" if "/" in n else f"{work.source}-{onto}/{n}"
                     for n in names]
    recipes_dir = recipe.patches_dir.parent / "recipes"
    texts = {new_name: patch_text(work, commit, recipe.patches_dir / old_name)
             for old_name, new_name, commit in zip(names, new_names, commits)}
    changed = {n: t for n, t in texts.items()
               if not (recipe.patches_dir / n).is_file() or (recipe.patches_dir / n).read_text() != t}
    if state["in_place"]:  # rewriting a patch another recipe lists would change that recipe too
        refuse_shared(recipe, work.source, list(changed), recipes_dir)
    for new_name, text in changed.items():  # unchanged files are left as they are
        target = recipe.patches_dir / new_name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    if state["in_place"] and recipe.sources[work.source].kind == "path":
        path = Path(recipe.path)  # nothing to pin: the path is the new base
    elif state["in_place"]:
        path = _pin_in_place(recipe, work.source, onto)
    else:
        path = _write_recipe(recipe, work.source, onto, dict(zip(names, new_names)), state.get("name"), recipes_dir)
    fresh = load_recipe(path, recipes_dir)
    tree_of(fresh, work.source, home)  # applies the new stack with zero fuzz and writes its lock
    shutil.rmtree(work.path)
    return RebaseResult(fresh.name, list(zip(new_names, state["how"])), work.path)


def refuse_shared(recipe: Recipe, source: str, names: list[str], recipes_dir: Path) -> None:
    """BadInput when rebasing `recipe` in place would rewrite one of `names` that another recipe lists."""
    for name in names:
        users = other_users(name, recipe, recipes_dir)
        if users:
            why = ("a path source is rebased in place" if recipe.sources[source].kind == "path"
                   else "or rebase into a new recipe: drop --in-place")
            raise BadInput(f"rebase of {recipe.name} in place would rewrite patches/{name}, which "
                           f"{', '.join(users)} also list{'s' if len(users) == 1 else ''}",
                           hint=f"give {recipe.name} its own copies of the patches first ({why})")


def _pin_in_place(recipe: Recipe, source: str, onto: str) -> Path:
    spec = recipe.sources[source]
    key = f"sources.{source}.{'pypi' if spec.kind == 'pypi' else 'rev'}"
    declared = Path(recipe.origins.get(key, recipe.path))
    old = spec.location if spec.kind == "pypi" else spec.rev
    new = f"{_project(spec.location)}=={onto}" if spec.kind == "pypi" else onto
    text = declared.read_text()
    if json.dumps(old) not in text:
        raise BadInput(f"{declared}: cannot find {key} = {json.dumps(old)} to update; edit it by hand to {new!r}")
    declared.write_text(text.replace(json.dumps(old), json.dumps(new), 1))
    return Path(recipe.path)


def _write_recipe(recipe: Recipe, source: str, onto: str, renamed: dict[str, str], name: str | None,
                  recipes_dir: Path) -> Path:
    path = recipes_dir / f"{name or recipe.name + '-' + onto}.toml"
    if path.exists():
        raise BadInput(f"{path} exists", hint="pass --name NEW, or --in-place")
    raw = json.loads(json.dumps(dict(recipe.raw)))
    raw.pop("extends", None)
    table = raw["sources"][source]
    if "pypi" in table:
        table["pypi"] = f"{_project(table['pypi'])}=={onto}"
        table.pop("sha256", None)
    else:
        table["rev"] = onto
    for t in raw.get("sources", {}).values():
        for k in ("path", "git", "index"):
            if isinstance(t.get(k), str):
                t[k] = _relative(t[k], path.parent)
    raw["patches"][source] = [renamed.get(n, n) for n in raw["patches"][source]]
    if "evidence" in raw:
        raw["evidence"] = {renamed.get(k, k): v for k, v in raw["evidence"].items()}
    raw["description"] = f"{recipe.description} (rebased onto {onto})".strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# Written by `patchbench patches rebase {recipe.name} --onto {onto}`: the resolved recipe on the new base.\n"
                    + tomli_w.dumps(raw))
    return path
