"""The patch author's loop: edit a recipe's patch stack as git commits, export them back as patches,
and rebase the stack onto another base (a git revision or a PyPI release).

    patchbench patches edit RECIPE [--source S]     a work tree on a branch at the applied head
    ... edit, `git commit` (new patches) or `git commit --amend` / `git rebase -i` (change one) ...
    patchbench patches export RECIPE [--source S]   new/amended commits -> patches/, recipe list, lock
    patchbench patches rebase RECIPE --onto V       3-way port of the stack; stops at a conflict

A work tree lives under `$PATCHBENCH_HOME/work/<recipe>/<source>` (a clone of the applied tree; one
commit per patch, as `apply` makes them). Its `.git/patchbench-work.json` records which commit is
which patch, so an export rewrites only what changed. Patches are written in the git layout
(`python/sglang/...` for a PyPI tree whose `package_dir` is `python`), like every shipped patch.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.tree import gitrepo
from toolkit.errors import BadInput, PatchbenchError
from toolkit.recipe.load import Recipe, load_recipe
from toolkit.tree.applied import AppliedTree, apply_recipe, require_sources
from toolkit.errors import plural

META = "patchbench-work.json"
_TRAILER = re.compile(r"\n*patchbench: \S+ sha256 [0-9a-f]+\n*$")


@dataclass
class Work:
    """A work tree of one source of a recipe, and which of its commits are which patches."""

    recipe: str
    recipe_path: str
    source: str
    path: Path
    base_commit: str
    prefix: str  # added to paths on export (package_dir for sdist/wheel trees)
    patches: list[str] = field(default_factory=list)  # patch names, in order
    patch_commits: list[str] = field(default_factory=list)  # commit of each patch in this work tree
    rebase: dict = field(default_factory=dict)  # a rebase in progress: onto, todo, new names, target
    applied_head: str = ""  # the applied tree's head this work tree was last in step with

    def save(self) -> None:
        d = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(self).items()}
        (self.path / ".git" / META).write_text(json.dumps(d, indent=1))

    @classmethod
    def load(cls, path: Path) -> "Work":
        try:
            d = json.loads((path / ".git" / META).read_text())
        except (OSError, ValueError):
            raise BadInput(f"{path} is not a patchbench work tree",
                           hint="start one with `patchbench patches edit RECIPE`") from None
        return cls(**{**d, "path": Path(d["path"])})


def pick_source(recipe: Recipe, source: str | None) -> str:
    require_sources(recipe)
    if source:
        if source not in recipe.sources:
            raise BadInput(f"recipe {recipe.name} has no source `{source}`", hint=f"sources: {', '.join(recipe.sources)}")
        return source
    with_patches = [s for s in recipe.sources if recipe.patches.get(s)]
    if len(recipe.sources) == 1:
        return next(iter(recipe.sources))
    if len(with_patches) == 1:
        return with_patches[0]
    raise BadInput(f"recipe {recipe.name} has several sources ({', '.join(recipe.sources)}): name one with --source")


def work_dir(home: Path, recipe: Recipe, source: str) -> Path:
    return home / "work" / recipe.name.replace("/", "__") / source


def tree_of(recipe: Recipe, source: str, home: Path) -> AppliedTree:
    for tree, _ in apply_recipe(recipe, home):
        if tree.source == source:
            return tree
    raise PatchbenchError(f"recipe {recipe.name}: source {source} was not applied")


def _prefix(tree: AppliedTree, recipe: Recipe, source: str) -> str:
    spec = recipe.sources[source]
    return f"{spec.package_dir}/" if tree.layout in ("sdist", "wheel") and spec.package_dir else ""


def edit(recipe: Recipe, source: str | None, home: Path) -> Work:
    """A work tree on branch `patchbench-edit` at the recipe's applied head (reused if unchanged)."""
    source = pick_source(recipe, source)
    tree = tree_of(recipe, source, home)
    dest = work_dir(home, recipe, source)
    if dest.exists():
        work = Work.load(dest)
        if work.rebase:
            raise BadInput(f"{dest} holds a rebase in progress",
                           hint=f"patchbench patches rebase {recipe.name} --continue (or --abort)")
        if gitrepo.is_clean(dest) and commits_of(work) == work.patch_commits and work.applied_head == tree.head_commit:
            return work  # nothing new since the last edit/export: the same stack
        raise BadInput(f"{dest} already holds work on {recipe.name} that is not exported",
                       hint=f"patchbench patches export {recipe.name}, or remove {dest}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    gitrepo.run(None, "clone", "-q", "--no-hardlinks", str(tree.path), str(dest), what="git clone (edit)")
    gitrepo.run(dest, "checkout", "-q", "-B", "patchbench-edit", tree.head_commit, what="git checkout")
    work = Work(recipe.name, str(recipe.path), source, dest, tree.base_commit, _prefix(tree, recipe, source),
                list(tree.patches), list(tree.patch_commits), applied_head=tree.head_commit)
    work.save()
    return work


# ------------------------------------------------------------------------------------- export


def commits_of(work: Work) -> list[str]:
    return gitrepo.out(work.path, "rev-list", "--reverse", f"{work.base_commit}..HEAD").split()


def _diff_text(work: Work, commit: str) -> str:
    return gitrepo.run(work.path, "show", "--format=", "--patch", "--binary", "--no-color", "--no-ext-diff",
                      f"--src-prefix=a/{work.prefix}", f"--dst-prefix=b/{work.prefix}", commit,
                      what="git show").stdout


def _message(work: Work, commit: str) -> tuple[str, str]:
    subject = gitrepo.out(work.path, "log", "-1", "--format=%s", commit)
    body = _TRAILER.sub("\n", gitrepo.run(work.path, "log", "-1", "--format=%b", commit).stdout).strip()
    return subject, body


def _header_of(patch_file: Path) -> str | None:
    """The prose before the first diff of an existing patch file (kept when the patch is amended)."""
    if not patch_file.is_file():
        return None
    text = patch_file.read_text()
    i = text.find("diff --git ")
    return text[:i] if i > 0 else None


def _slug(subject: str, limit: int = 48) -> str:
    """The subject as a file name: lower-case words joined by `-`, whole words up to `limit`
    characters (a first word longer than that is cut)."""
    words = [w for w in re.split(r"[^a-z0-9]+", subject.lower()) if w]
    out = ""
    for word in words:
        if out and len(out) + 1 + len(word) > limit:
            break
        out = f"{out}-{word}" if out else word[:limit]
    return out or "change"


def patch_folder(recipe: Recipe, source: str, names: list[str]) -> str:
    """Where a new patch of `source` goes under patches/: beside the source's stack (its last
    patch's folder), else beside the recipe's other patches, else the folder of the recipe it
    extends (`demo/` for a recipe built on demo/baseline: a demo patch is not put beside the GLM-5
    ones in `sglang/`), else the recipe's own folder, else the source's name."""
    import tomllib

    for group in (names, [n for s in recipe.sources for n in recipe.patch_names(s)]):
        folders = [n.rsplit("/", 1)[0] for n in group if "/" in n]
        if folders:
            return folders[-1]
    try:
        parent = str(tomllib.loads(Path(recipe.path).read_text()).get("extends") or "")
    except (OSError, tomllib.TOMLDecodeError):
        parent = ""
    for name in (parent if not parent.startswith(".") else "", recipe.name):
        if "/" in name:
            return name.rsplit("/", 1)[0]
    return source


def _new_name(recipe: Recipe, work: Work, subject: str, taken: set[str]) -> str:
    folder = patch_folder(recipe, work.source, list(work.patches))
    base = f"{folder}/{_slug(subject)}"
    name, n = f"{base}.patch", 2
    while name in taken or (recipe.patches_dir / name).exists():
        name, n = f"{base}-{n}.patch", n + 1
    return name


def patch_text(work: Work, commit: str, keep_header_of: Path | None) -> str:
    subject, body = _message(work, commit)
    header = _header_of(keep_header_of) if keep_header_of else None
    if header is None:
        header = f"Subject: [PATCH] {subject}\n\n" + (f"{body}\n\n" if body else "")
    return header + _diff_text(work, commit)


def set_patch_list(recipe_path: Path, source: str, names: list[str]) -> None:
    """Rewrite `[patches] SOURCE = [...]` in the recipe file itself (comments elsewhere kept)."""
    text = recipe_path.read_text()
    rendered = f"{source} = [" + ", ".join(json.dumps(n) for n in names) + "]"
    table = re.search(r"(?ms)^\[patches\][ \t]*\n(.*?)(?=^\[|\Z)", text)
    if table is None:
        text = text.rstrip("\n") + f"\n\n[patches]\n{rendered}\n"
    else:
        body = table.group(1)
        line = re.search(rf"(?ms)^{re.escape(source)}\s*=\s*\[.*?\]", body)
        body = (body[:line.start()] + rendered + body[line.end():]) if line else rendered + "\n" + body
        text = text[:table.start(1)] + body + text[table.end(1):]
    recipe_path.write_text(text)


def export(recipe: Recipe, source: str | None, home: Path) -> list[tuple[str, str]]:
    """Write new and amended commits of the work tree as patches; returns [(name, new|amended)]."""
    source = pick_source(recipe, source)
    work = Work.load(work_dir(home, recipe, source))
    if not gitrepo.is_clean(work.path):
        raise BadInput(f"{work.path} has uncommitted changes", hint="commit them (git commit -a) and export again")
    commits = commits_of(work)
    if len(commits) < len(work.patches):
        raise BadInput(f"{work.path} has {plural(len(commits), 'commit')} for {plural(len(work.patches), 'patch')}: dropping a patch is "
                       f"a recipe edit (remove it from [patches]), not an export")
    written: list[tuple[str, str]] = []
    names = list(work.patches)
    amended = [names[i] for i, c in enumerate(commits[:len(names)])
               if not (i < len(work.patch_commits) and work.patch_commits[i] == c)]
    recipes_dir = recipe.patches_dir.parent / "recipes"
    for name in amended:  # rewriting a patch another recipe lists would change that recipe's measurements too
        users = other_users(name, recipe, recipes_dir)
        if users:
            raise BadInput(f"export of {recipe.name} would rewrite patches/{name}, which {', '.join(users)} also "
                           f"list{'s' if len(users) == 1 else ''}: nothing written",
                           hint=f"give {recipe.name} its own copy (copy the file under a new name and list that in "
                                f"{recipe.path}), then edit and export again")
    for i, commit in enumerate(commits):
        if i < len(work.patch_commits) and work.patch_commits[i] == commit:
            continue
        if i < len(names):
            name, what = names[i], "amended"
        else:
            name, what = _new_name(recipe, work, _message(work, commit)[0], set(names)), "new"
            names.append(name)
        target = recipe.patches_dir / name
        text = patch_text(work, commit, target if what == "amended" else None)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        written.append((name, what))
    own = [n for n in names if n not in _inherited(recipe, source)]
    if any(w == "new" for _, w in written):
        set_patch_list(Path(recipe.path), source, own)
    fresh = load_recipe(recipe.path, recipe.patches_dir.parent / "recipes")
    tree = tree_of(fresh, source, home)  # writes the refreshed lock
    work.patches, work.patch_commits, work.applied_head = list(tree.patches), commits, tree.head_commit
    work.save()
    return written


def other_users(patch: str, recipe: Recipe, recipes_dir: Path) -> list[str]:
    """The other recipes under `recipes_dir` whose patch lists name `patch`."""
    from toolkit.recipe.load import list_recipe_names

    target = (recipe.patches_dir / patch).resolve()
    users = []
    for name in list_recipe_names(recipes_dir):
        if name == recipe.name:
            continue
        try:
            other = load_recipe(recipes_dir / f"{name}.toml", recipes_dir)
        except PatchbenchError:
            continue
        if any(Path(p).resolve() == target for paths in dict(other.patches).values() for p in paths):
            users.append(name)
    return users


def _inherited(recipe: Recipe, source: str) -> list[str]:
    """Patch names of `source` that the recipe's own file does not list (they come from a parent)."""
    import tomllib

    own = tomllib.loads(Path(recipe.path).read_text()).get("patches", {}).get(source, [])
    return [n for n in recipe.patch_names(source) if n not in own]
