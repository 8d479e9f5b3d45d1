"""apply: git sources, ordered stacks, one commit per patch, lock and --frozen, reuse."""

from __future__ import annotations

import json
import textwrap

import pytest

from conftest import change, git
from toolkit.cli import main
from toolkit.errors import BadInput, PatchbenchError
from toolkit.recipe.load import load_recipe
from toolkit.tree.applied import apply_recipe, check_plan, plan_source

RECIPE = """
description = "three patches"
[sources.mini]
git = "@UPSTREAM@"
rev = "v1"
package_dir = "python"
[patches]
mini = [{stack}]
"""


def three(project):
    project.patch("p1.patch", change("STEP_MS = 10", "STEP_MS = 8"))
    # p2 depends on p1 (its context is p1's result): order matters
    project.patch("p2.patch", """\
        Subject: prefill 1 -> 2

        diff --git a/python/mini/cost.py b/python/mini/cost.py
        --- a/python/mini/cost.py
        +++ b/python/mini/cost.py
        @@ -1,3 +1,3 @@
         STEP_MS = 8
        -PREFILL_MS = 1
        +PREFILL_MS = 2
         NAME = 'mini'
        """)
    project.patch("p3.patch", """\
        diff --git a/python/mini/extra.py b/python/mini/extra.py
        new file mode 100644
        --- /dev/null
        +++ b/python/mini/extra.py
        @@ -0,0 +1 @@
        +EXTRA = True
        """)
    stack = ", ".join(f'"p{i}.patch"' for i in (1, 2, 3))
    return project.recipe("three", RECIPE.format(stack=stack))


def test_three_patches_three_commits_and_lock(project, home, capsys):
    path = three(project)
    recipe = load_recipe(path)
    [(tree, reused)] = apply_recipe(recipe, home)
    assert not reused
    log = git(tree.path, "log", "--format=%s", f"{tree.base_commit}..HEAD").splitlines()
    assert log == ["p3", "prefill 1 -> 2", "STEP_MS = 10 -> STEP_MS = 8"]
    assert len(tree.patch_commits) == 3 and tree.patch_commits[-1] == tree.head_commit
    assert (tree.path / "python/mini/cost.py").read_text().startswith("STEP_MS = 8\nPREFILL_MS = 2")
    assert git(tree.path, "rev-parse", "HEAD^{tree}") == tree.tree_hash
    lock = json.loads(recipe.lock_path.read_text())
    entry = lock["sources"]["mini"]
    assert entry["resolved"] == git(project.upstream, "rev-parse", "v1")
    assert [p["name"] for p in entry["patches"]] == ["p1.patch", "p2.patch", "p3.patch"]
    assert entry["tree_hash"] == tree.tree_hash
    # Second run: reused, same tree; --frozen passes.
    [(again, reused)] = apply_recipe(recipe, home, frozen=True)
    assert reused and again.tree_hash == tree.tree_hash
    assert main(["apply", str(path), "--frozen", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trees"][0]["reused"] is True
    # One byte of one patch changes: --frozen refuses, naming the patch.
    p2 = project.patches / "p2.patch"
    p2.write_text(p2.read_text().replace("Subject: prefill 1 -> 2", "Subject: prefill 1 -> 2!"))
    with pytest.raises(BadInput, match="patch p2.patch changed since the lock"):
        apply_recipe(load_recipe(path), home, frozen=True)
    assert main(["apply", str(path), "--frozen"]) == 2


def test_order_dependence_is_checked(project, home):
    three(project)
    path = project.recipe("reversed", RECIPE.format(stack='"p2.patch", "p1.patch"'))
    recipe = load_recipe(path)
    plan = plan_source(recipe, "mini", home)
    d = check_plan(plan, home)
    assert d[0].status == "conflict" and d[0].file == "python/mini/cost.py" and d[0].hunk.startswith("@@ -1,3")
    with pytest.raises(PatchbenchError, match=r"patch p2.patch does not apply in python/mini/cost.py at hunk @@ -1,3 \+1,3 @@: conflict"):
        apply_recipe(recipe, home)
    assert not list((home / "trees").glob("mini-*/.git")), "a failed apply must not publish a tree"


def test_already_applied_is_detected(project, home, capsys):
    project.patch("p1.patch", change("STEP_MS = 10", "STEP_MS = 8"))
    project.write_upstream("python/mini/cost.py", "STEP_MS = 8\nPREFILL_MS = 1\nNAME = 'mini'\n")
    project.commit("upstream took the change")
    git(project.upstream, "tag", "v2")
    path = project.recipe("dup", RECIPE.format(stack='"p1.patch"').replace('"v1"', '"v2"'))
    assert main(["patches", "check", str(path)]) == 1
    assert "already-applied" in capsys.readouterr().out


def test_missing_file_and_unknown_rev(project, home):
    project.patch("gone.patch", change("X = 1", "X = 2", path="python/mini/nothere.py"))
    path = project.recipe("gone", RECIPE.format(stack='"gone.patch"'))
    d = check_plan(plan_source(load_recipe(path), "mini", home), home)
    assert d[0].status == "file-missing"
    bad = project.recipe("badrev", RECIPE.format(stack="").replace('"v1"', '"v9"'))
    with pytest.raises(BadInput, match="unknown revision `v9`"):
        apply_recipe(load_recipe(bad), home)


def test_moved_tag_fails_frozen(project, home):
    path = project.recipe("tag", RECIPE.format(stack=""))
    apply_recipe(load_recipe(path), home)
    project.write_upstream("python/mini/__init__.py", "VERSION = '1.1'\n")
    project.commit("moved")
    git(project.upstream, "tag", "-f", "v1")
    with pytest.raises(BadInput, match="rev `v1` moved"):
        apply_recipe(load_recipe(path), home, frozen=True)


def test_path_source_includes_uncommitted_changes(project, home):
    project.write_upstream("python/mini/cost.py", "STEP_MS = 99\nPREFILL_MS = 1\nNAME = 'mini'\n")  # not committed
    path = project.recipe("local", '[sources.mini]\npath = "@UPSTREAM@"\npackage_dir = "python"\n')
    [(tree, _)] = apply_recipe(load_recipe(path), home)
    assert "STEP_MS = 99" in (tree.path / "python/mini/cost.py").read_text()
    assert tree.layout == "path" and len(tree.origin["resolved"]) == 64
    project.write_upstream("python/mini/cost.py", "STEP_MS = 98\nPREFILL_MS = 1\nNAME = 'mini'\n")
    [(tree2, reused)] = apply_recipe(load_recipe(path), home)
    assert not reused and tree2.tree_hash != tree.tree_hash


def test_damaged_tree_is_rebuilt(project, home):
    path = three(project)
    [(tree, _)] = apply_recipe(load_recipe(path), home)
    (tree.path / "python/mini/cost.py").write_text("tampered\n")
    [(again, reused)] = apply_recipe(load_recipe(path), home)
    assert not reused and again.tree_hash == tree.tree_hash
    assert "STEP_MS = 8" in (again.path / "python/mini/cost.py").read_text()


def test_lock_written_in_one_clone_passes_frozen_in_another(tmp_path, home, capsys):
    """A committed lock names local sources relative to itself: a clone elsewhere passes --frozen."""
    a = tmp_path / "alice" / "proj"
    for d in ("recipes", "patches", "vendor/mini/python/mini"):
        (a / d).mkdir(parents=True)
    (a / "vendor/mini/python/mini/cost.py").write_text("STEP_MS = 10\nPREFILL_MS = 1\nNAME = 'mini'\n")
    (a / "patches/p1.patch").write_text(textwrap.dedent(change("STEP_MS = 10", "STEP_MS = 8")))
    (a / "recipes/local.toml").write_text('[sources.mini]\npath = "../vendor/mini"\npackage_dir = "python"\n'
                                          '[patches]\nmini = ["p1.patch"]\n')
    git(a, "init", "-q")
    assert main(["apply", str(a / "recipes/local.toml")]) == 0
    lock_text = (a / "recipes/local.lock.json").read_text()
    assert str(tmp_path) not in lock_text
    assert json.loads(lock_text)["sources"]["mini"]["location"] == "../vendor/mini"
    git(a, "add", "-A")
    git(a, "commit", "-q", "-m", "recipe, patch and lock")

    b = tmp_path / "elsewhere" / "deeper" / "bob-proj"  # another path, another depth
    git(tmp_path, "clone", "-q", str(a), str(b))
    capsys.readouterr()
    assert main(["apply", str(b / "recipes/local.toml"), "--frozen"]) == 0, capsys.readouterr().err
    assert git(b, "status", "--porcelain") == ""  # --frozen wrote nothing, the lock is as committed
    # The portable lock still catches drift in the clone.
    (b / "vendor/mini/python/mini/cost.py").write_text("STEP_MS = 10\nPREFILL_MS = 2\nNAME = 'mini'\n")
    assert main(["apply", str(b / "recipes/local.toml"), "--frozen"]) == 2
    assert "local tree changed" in capsys.readouterr().err


def test_lock_with_absolute_paths_still_passes_frozen(project, home):
    """Locks written before paths were portable (absolute) are read and compared the same way."""
    git(project.root, "init", "-q")
    path = project.recipe("local", '[sources.mini]\npath = "@UPSTREAM@"\npackage_dir = "python"\n')
    apply_recipe(load_recipe(path), home)
    lock_path = load_recipe(path).lock_path
    lock = json.loads(lock_path.read_text())
    assert lock["sources"]["mini"]["location"] == "../upstream"
    lock["sources"]["mini"]["location"] = str(project.upstream)
    lock_path.write_text(json.dumps(lock))
    apply_recipe(load_recipe(path), home, frozen=True)


def test_git_layout_patch_maps_onto_a_pypi_layout_tree(project, tmp_path):
    """A patch in the git layout (python/mini/...) applies to a tree with the package at its root:
    edits, renames and new files; a file outside python/ and a stale hunk are named in that layout."""
    from toolkit.tree import gitrepo
    from toolkit.tree.patches import apply_one, check_stack, parse_patch

    tree = tmp_path / "sdist"
    (tree / "mini").mkdir(parents=True)
    (tree / "mini/cost.py").write_text("STEP_MS = 10\nPREFILL_MS = 1\nNAME = 'mini'\n")
    (tree / "mini/old.py").write_text("OLD = 1\n")
    gitrepo.init(tree)
    gitrepo.commit_all(tree, "sdist")
    edit = parse_patch(project.patch("edit.patch", change("STEP_MS = 10", "STEP_MS = 8")))
    rename = parse_patch(project.patch("rename.patch", """\
        diff --git a/python/mini/old.py b/python/mini/new.py
        similarity index 100%
        rename from python/mini/old.py
        rename to python/mini/new.py
        """))
    outside = parse_patch(project.patch("outside.patch", """\
        diff --git a/docs/x.md b/docs/x.md
        new file mode 100644
        --- /dev/null
        +++ b/docs/x.md
        @@ -0,0 +1 @@
        +x
        """))
    stale = parse_patch(project.patch("stale.patch", change("STEP_MS = 11", "STEP_MS = 12")))
    d = check_stack(tree, [edit, rename, outside, stale], "python")
    assert [x.status for x in d] == ["applies", "applies", "file-missing", "conflict"]
    assert "outside `python/`" in d[2].detail
    assert d[3].file == "mini/cost.py" and d[3].hunk == "@@ -1,3 +1,3 @@"
    apply_one(tree, edit, "python")
    apply_one(tree, rename, "python")
    assert (tree / "mini/cost.py").read_text().startswith("STEP_MS = 8\n")
    assert (tree / "mini/new.py").read_text() == "OLD = 1\n" and not (tree / "mini/old.py").exists()
    assert gitrepo.is_clean(tree)


def test_commit_shas_are_the_same_in_any_home(project, tmp_path):
    """Fixed identity and dates: the same base and stack give the same commits anywhere, any time."""
    path = three(project)
    [(one, _)] = apply_recipe(load_recipe(path), tmp_path / "home-one")
    [(two, _)] = apply_recipe(load_recipe(path), tmp_path / "home-two")
    assert one.path != two.path
    assert one.patch_commits == two.patch_commits and one.head_commit == two.head_commit
    assert git(one.path, "log", "-1", "--format=%an <%ae> %ad", "--date=iso") == \
        "patchbench <patchbench@localhost> 2000-01-01 00:00:00 +0000"
