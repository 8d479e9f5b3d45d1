"""`patches check` works on a cached base tree: built once, reused by every later check, and
never changed by one; an empty stack needs no tree at all."""

from __future__ import annotations

from conftest import change, git
from toolkit.recipe.load import load_recipe
from toolkit.tree.applied import apply_recipe, check_plan, plan_source

RECIPE = """
description = "check on a cached base"
[sources.mini]
git = "@UPSTREAM@"
rev = "v1"
package_dir = "python"
[patches]
mini = [{stack}]
"""


def test_check_reuses_the_base_tree_and_changes_nothing(project, home):
    project.patch("p1.patch", change("STEP_MS = 10", "STEP_MS = 8"))
    recipe = load_recipe(project.recipe("one", RECIPE.format(stack='"p1.patch"')))
    plan = plan_source(recipe, "mini", home)
    (d,) = check_plan(plan, home)
    assert d.ok and d.status == "applies"
    (base,) = [p for p in (home / "bases").glob("mini-*") if p.suffix != ".check" and p.is_dir()]
    assert (home / "bases" / f"{base.name}.check" / ".git").is_dir()  # the kept scratch clone
    head = git(base, "rev-parse", "HEAD")
    stamp = (base / ".git" / "HEAD").stat().st_mtime_ns

    (d,) = check_plan(plan_source(recipe, "mini", home), home)
    assert d.ok
    assert [p.name for p in (home / "bases").glob("mini-*") if p.suffix != ".check" and p.is_dir()] == [base.name]
    assert git(base, "rev-parse", "HEAD") == head and git(base, "status", "--porcelain") == ""
    assert (base / ".git" / "HEAD").stat().st_mtime_ns == stamp
    assert (base / "python" / "mini" / "cost.py").read_text().startswith("STEP_MS = 10")


def test_a_published_unpatched_tree_is_the_base_and_no_patches_need_no_tree(project, home):
    bare = load_recipe(project.recipe("bare", RECIPE.format(stack="")))
    assert check_plan(plan_source(bare, "mini", home), home) == []
    assert not (home / "bases").exists() and not (home / "trees").exists()
    ((tree, _),) = apply_recipe(bare, home)  # a recipe that patches nothing publishes the base
    project.patch("p1.patch", change("STEP_MS = 10", "STEP_MS = 8"))
    one = load_recipe(project.recipe("one", RECIPE.format(stack='"p1.patch"')))
    (d,) = check_plan(plan_source(one, "mini", home), home)
    assert d.ok and [p.name for p in (home / "bases").glob("mini-*") if p.is_dir()] == \
        [f"{tree.path.name}.check"]  # the published tree is the base: only a scratch clone of it
    assert git(tree.path, "status", "--porcelain") == ""


def test_a_patched_tree_made_from_a_known_base_is_the_same_tree(project, home, tmp_path):
    project.patch("p1.patch", change("STEP_MS = 10", "STEP_MS = 8"))
    one = project.recipe("one", RECIPE.format(stack='"p1.patch"'))
    ((fresh, _),) = apply_recipe(load_recipe(one), tmp_path / "other-home")  # from the source
    apply_recipe(load_recipe(project.recipe("bare", RECIPE.format(stack=""))), home)
    ((cloned, _),) = apply_recipe(load_recipe(one), home)  # from the published base tree
    assert (cloned.head_commit, cloned.tree_hash, cloned.patch_commits) == \
        (fresh.head_commit, fresh.tree_hash, fresh.patch_commits)
