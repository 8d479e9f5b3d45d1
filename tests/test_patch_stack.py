"""The patch author's loop: edit a stack as commits, export patches, rebase onto a new upstream."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import change, demo_project, git
from toolkit.cli import main
from toolkit.recipe.load import load_recipe

BASE = """
description = "mini"
[sources.mini]
git = "@UPSTREAM@"
rev = "v1"
package_dir = "python"
[patches]
mini = ["mini/step.patch", "mini/name.patch"]
"""


def _stack(project):
    project.write_upstream("python/mini/cost.py",
                           "STEP_MS = 10\nPREFILL_MS = 1\nNAME = 'mini'\n\n\n\n\n\nSEQ_US = 40\nKV = 'bf16'\nPAGE = 64\n")
    project.commit("more knobs")
    git(project.upstream, "tag", "-f", "v1")
    project.patch("mini/step.patch", change("STEP_MS = 10", "STEP_MS = 8"))
    project.patch("mini/name.patch", """\
        Subject: seq cost

        diff --git a/python/mini/cost.py b/python/mini/cost.py
        --- a/python/mini/cost.py
        +++ b/python/mini/cost.py
        @@ -7,5 +7,5 @@ NAME = 'mini'
         
         
        -SEQ_US = 40
        +SEQ_US = 20
         KV = 'bf16'
         PAGE = 64
        """)
    return project.recipe("mini", BASE)


def test_rebase_merges_moved_context_and_stops_at_a_real_conflict(project, home, capsys, monkeypatch):
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(project.recipes))
    _stack(project)
    # v2: lines inserted, and a context line of the second patch changed (its zero-fuzz apply fails;
    # a 3-way merge works: the change is not next to the patch's own line)
    project.write_upstream("python/mini/cost.py",
                           "STEP_MS = 10\nPREFILL_MS = 1\nNAME = 'mini'\nTP = 1\nEP = 1\n\n\n\n\n\nSEQ_US = 40\nKV = 'bf16'\nPAGE = 128\n")
    project.commit("v2")
    git(project.upstream, "tag", "v2")
    assert main(["patches", "check", "mini"]) == 0
    assert main(["patches", "rebase", "mini", "--onto", "v2"]) == 0
    out = capsys.readouterr().out
    assert "applies patches/mini-v2/step.patch" in " ".join(out.split())
    assert "3-way merged patches/mini-v2/name.patch" in " ".join(out.split())
    new = load_recipe("mini-v2")
    assert new.sources["mini"].rev == "v2" and new.patch_names("mini") == ("mini-v2/step.patch", "mini-v2/name.patch")
    assert (project.recipes / "mini-v2.lock.json").is_file()
    assert main(["patches", "check", "mini-v2"]) == 0
    # v3 changes the very line the first patch changes: a conflict, reported with both sides
    project.write_upstream("python/mini/cost.py",
                           "STEP_MS = 12\nPREFILL_MS = 1\nNAME = 'mini'\n\n\n\n\n\nSEQ_US = 40\nKV = 'bf16'\nPAGE = 64\n")
    project.commit("v3")
    git(project.upstream, "tag", "v3")
    capsys.readouterr()
    assert main(["patches", "rebase", "mini", "--onto", "v3"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "patch mini/step.patch does not merge onto v3: conflict in python/mini/cost.py" in err
    assert "the new base has STEP_MS = 12; the patch wants STEP_MS = 8" in err
    assert "--continue" in err and "--abort" in err
    assert main(["patches", "rebase", "mini", "--onto", "v3"]) == 2  # one rebase at a time
    # resolve by taking the patch's side, then continue
    work = home / "work" / "mini" / "mini-onto-v3"
    cost = work / "python/mini/cost.py"
    text = cost.read_text()
    start, end = text.index("<<<<<<<"), text.index(">>>>>>>")
    cost.write_text(text[:start] + "STEP_MS = 8\n" + text[text.index("\n", end) + 1:])
    git(work, "add", "python/mini/cost.py")
    assert main(["patches", "rebase", "mini", "--onto", "v3", "--continue"]) == 0
    assert "resolved patches/mini-v3/step.patch" in " ".join(capsys.readouterr().out.split())
    assert main(["patches", "check", "mini-v3"]) == 0


def test_rebase_abort_leaves_nothing(project, home, monkeypatch, capsys):
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(project.recipes))
    _stack(project)
    project.write_upstream("python/mini/cost.py", "STEP_MS = 12\n")
    project.commit("v9")
    git(project.upstream, "tag", "v9")
    assert main(["patches", "rebase", "mini", "--onto", "v9"]) == 1
    assert main(["patches", "rebase", "mini", "--onto", "v9", "--abort"]) == 0
    assert not (home / "work" / "mini" / "mini-onto-v9").exists()
    assert not (project.recipes / "mini-v9.toml").exists()


def test_readme_loop_edit_export_run_compare(tmp_path, home, monkeypatch, capsys):
    """A newcomer's first own experiment, by the README: a recipe of their own, a patch written with
    `patches edit` + `export`, run against demo/baseline and compared."""
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/mine").mkdir()
    (proj / "recipes/mine/quick.toml").write_text(
        'description = "mine: a quicker decode step"\nextends = "demo/baseline"\n'
        '[benchmark]\nconcurrency = [1]\nrepeats = 2\nnum_prompts = 8\n')
    (proj / "recipes/mine/base.toml").write_text(
        'description = "demo baseline, short"\nextends = "demo/baseline"\n'
        '[benchmark]\nconcurrency = [1]\nrepeats = 2\nnum_prompts = 8\n')
    assert main(["patches", "edit", "mine/quick"]) == 0
    work = home / "work" / "mine__quick" / "sglang"
    cost = work / "python/sglang/srt/model_executor/cost.py"
    cost.write_text(cost.read_text().replace("STEP_BASE_S = 0.012", "STEP_BASE_S = 0.006"))
    git(work, "commit", "-qam", "decode: halve the step's base cost")
    assert main(["patches", "export", "mine/quick"]) == 0
    assert "new patches/demo/decode-halve-the-step-s-base-cost.patch" in " ".join(capsys.readouterr().out.split())
    recipe = load_recipe("mine/quick")
    assert recipe.patch_names("sglang") == ("demo/decode-halve-the-step-s-base-cost.patch",)  # the stack's folder
    assert main(["patches", "export", "mine/quick"]) == 0  # nothing new: a no-op
    assert "nothing new to export" in capsys.readouterr().out
    assert main(["run", "mine/base", "mine/quick"]) == 0
    capsys.readouterr()
    assert main(["compare", "mine/base", "mine/quick", "--metric", "output_tok_s", "--json"]) == 0
    out = capsys.readouterr().out
    assert "mine/quick" in out
    proc = subprocess.run(["git", "apply", "--check", "-p1",
                           str(proj / "patches/demo/decode-halve-the-step-s-base-cost.patch")],
                          cwd=proj / "upstream/minisglang", capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_export_refuses_to_rewrite_a_patch_another_recipe_lists(tmp_path, home, monkeypatch, capsys):
    """A child of demo/fast amends the patch it inherits: exporting would change demo/fast's stack (and
    every run of it to come) behind its back; refused in one line naming demo/fast, nothing written."""
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/mine").mkdir()
    (proj / "recipes/mine/two.toml").write_text('extends = "demo/fast"\n')
    shared = next(p for p in load_recipe("demo/fast").patches["sglang"])
    before = Path(shared).read_text()
    assert main(["patches", "edit", "mine/two"]) == 0
    work = home / "work" / "mine__two" / "sglang"
    cost = work / "python/sglang/srt/model_executor/cost.py"
    cost.write_text(cost.read_text() + "\n# tuned\n")
    git(work, "commit", "-q", "-a", "--amend", "--no-edit")
    capsys.readouterr()
    assert main(["patches", "export", "mine/two"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "would rewrite patches/" in err and "demo/fast" in err and "nothing written" in err, err
    assert Path(shared).read_text() == before


def test_exported_names_keep_whole_words():
    from toolkit.tree.stack import _slug

    name = _slug("moe: route the top-k experts through the fused cutlass kernel for small batches")
    assert name == "moe-route-the-top-k-experts-through-the-fused"  # 45 characters, no word cut
    assert len(_slug("x" * 80)) == 48 and _slug("!!!") == "change"


def test_rebase_a_path_source_onto_its_current_content(project, home, monkeypatch, capsys):
    """A local path has one new state, its content now: the stack as applied to the content the lock
    recorded is cherry-picked onto it (3-way merges, conflicts with --continue), patches rewritten in place."""
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(project.recipes))
    path = _stack(project)
    path.write_text(path.read_text().replace(f'git = "{project.upstream}"\nrev = "v1"', f'path = "{project.upstream}"'))
    assert main(["apply", "mini"]) == 0  # the stack applied to the path's content, lock written
    project.write_upstream("python/mini/cost.py",
                           "STEP_MS = 10\nPREFILL_MS = 1\nNAME = 'mini'\nTP = 1\nEP = 1\n\n\n\n\n\nSEQ_US = 40\nKV = 'bf16'\nPAGE = 128\n")
    capsys.readouterr()
    assert main(["patches", "rebase", "mini", "--onto", "v2"]) == 2  # a path has no revisions: it says so
    assert "--onto HEAD" in capsys.readouterr().err
    assert main(["patches", "rebase", "mini", "--onto", "HEAD"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "applies patches/mini/step.patch" in out and "3-way merged patches/mini/name.patch" in out
    assert load_recipe("mini").sources["mini"].kind == "path"
    assert main(["patches", "check", "mini"]) == 0
    assert " PAGE = 128" in (project.patches / "mini/name.patch").read_text()  # written against the new content

    project.write_upstream("python/mini/cost.py",  # the very line the first patch changes
                           "STEP_MS = 12\nPREFILL_MS = 1\nNAME = 'mini'\nTP = 1\nEP = 1\n\n\n\n\n\nSEQ_US = 40\nKV = 'bf16'\nPAGE = 128\n")
    assert main(["patches", "rebase", "mini", "--onto", "HEAD"]) == 1
    assert "the new base has STEP_MS = 12; the patch wants STEP_MS = 8" in " ".join(capsys.readouterr().err.split())
    work = home / "work" / "mini" / "mini-onto-HEAD"
    cost = work / "python/mini/cost.py"
    text = cost.read_text()
    start, end = text.index("<<<<<<<"), text.index(">>>>>>>")
    cost.write_text(text[:start] + "STEP_MS = 8\n" + text[text.index("\n", end) + 1:])
    git(work, "add", "python/mini/cost.py")
    assert main(["patches", "rebase", "mini", "--onto", "HEAD", "--continue"]) == 0
    assert "resolved patches/mini/step.patch" in " ".join(capsys.readouterr().out.split())
    assert main(["patches", "check", "mini"]) == 0

    # in place, a patch another recipe lists would change under that recipe too: refused, nothing written
    project.recipe("other", 'extends = "mini"\n')
    before = (project.patches / "mini/name.patch").read_text()
    project.write_upstream("python/mini/cost.py", "STEP_MS = 12\nPREFILL_MS = 1\nNAME = 'mini'\nTP = 1\n"
                           "EP = 1\n\n\n# a note in name.patch's context\n\n\nSEQ_US = 40\nKV = 'bf16'\nPAGE = 128\n")
    assert main(["patches", "rebase", "mini", "--onto", "HEAD"]) == 2
    assert "which other also lists" in " ".join(capsys.readouterr().err.split())
    assert (project.patches / "mini/name.patch").read_text() == before


def test_a_patch_that_conflicts_with_an_earlier_one_of_its_stack_is_told_so(tmp_path, home, monkeypatch, capsys):
    """Two demo patches that change the same line: the second's conflict names the first (the base
    did not move, so "rebase" would lead nowhere)."""
    from conftest import demo_project

    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/demo/both.toml").write_text(
        'extends = "demo/baseline"\n[patches]\nsglang = ["demo/faster-decode.patch", "demo/slower-decode.patch"]\n')
    main(["patches", "check", "demo/both"])
    out = capsys.readouterr()
    text = out.out + out.err
    assert "an earlier patch of this stack, demo/faster-decode.patch, changed that line" in text, text
    assert "the base moved on" not in text


def test_check_says_where_a_hunk_applies_when_its_context_moved(tmp_path, home, monkeypatch, capsys):
    """A patch whose hunk header is 5 lines off applies without fuzz (git finds the context): check
    says "applies" and where, so a stale patch is seen before it stops applying."""
    import re

    proj = demo_project(tmp_path, monkeypatch)
    text = (proj / "patches/demo/faster-decode.patch").read_text()
    moved = re.sub(r"@@ -(\d+),(\d+) \+(\d+),(\d+) @@",
                   lambda m: f"@@ -{int(m[1]) - 5},{m[2]} +{int(m[3]) - 5},{m[4]} @@", text)
    (proj / "patches/demo/moved.patch").write_text(moved)
    (proj / "recipes/demo/moved.toml").write_text('extends = "demo/baseline"\n[patches]\nsglang = ["demo/moved.patch"]\n')
    assert main(["patches", "check", "demo/moved", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"applies"' in out and "applies at line 18 (offset 5 lines)" in out, out
