"""compare / attribute / bisect end to end on the miniature upstream: real trees, envs, servers."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import REPO_ROOT, git
from toolkit.cli import main

MINI = REPO_ROOT / "upstream" / "minisglang"
COST = "python/sglang/srt/model_executor/cost.py"

BENCH = """
[build]
mode = "full"
[server]
model = "mini"
gpus = 0
timeout_s = 60
[server.args]
tp-size = 1
[benchmark]
driver = "serving"
input_len = 8
output_len = 12
concurrency = [1]
num_prompts = 3
warmup = 1
repeats = 3
[expect]
tp_size = 1
"""


@pytest.fixture
def mini(tmp_path, home):
    """A git copy of the miniature upstream plus recipes/ and patches/ beside it."""
    root = tmp_path / "proj"
    up = root / "mini"
    shutil.copytree(MINI, up, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    git(up, "init", "-q")
    git(up, "add", "-A")
    git(up, "commit", "-qm", "base")
    git(up, "tag", "good")
    (root / "recipes").mkdir()
    (root / "patches").mkdir()
    return root


def _new_file_patch(i: int) -> str:
    return textwrap.dedent(f"""\
        Subject: harmless {i}

        diff --git a/python/sglang/srt/extra_{i}.py b/python/sglang/srt/extra_{i}.py
        new file mode 100644
        --- /dev/null
        +++ b/python/sglang/srt/extra_{i}.py
        @@ -0,0 +1 @@
        +X = {i}
        """)


def _cost_patch(root, old: str, new: str, subject: str, after: tuple = ()) -> str:
    """A real diff of cost.py made with git in a scratch copy (on top of the `after` edits)."""
    return _edit_patch(root, COST, old, new, subject, after=after)


def _edit_patch(root, rel: str, old: str, new: str, subject: str, after: tuple = ()) -> str:
    """A real diff of `rel` replacing `old` by `new`, made with git in a scratch copy of the miniature on top of
    the `after` edits ((before, replacement) pairs, committed first)."""
    scratch = root / "scratch"
    if scratch.exists():
        shutil.rmtree(scratch)
    shutil.copytree(root / "mini", scratch)
    path = scratch / rel
    text = path.read_text()
    for a, b in after:
        text = text.replace(a, b)
    path.write_text(text)
    git(scratch, "commit", "-q", "--allow-empty", "-am", "stacked on")
    assert old in text
    path.write_text(text.replace(old, new))
    diff = subprocess.run(["git", "diff"], cwd=scratch, capture_output=True, text=True, check=True).stdout
    shutil.rmtree(scratch)
    return f"Subject: {subject}\n\n{diff}"


def _recipe(root, name, stack, source='path = "../mini"'):
    entries = ", ".join(f'"{p}"' for p in stack)
    (root / "recipes" / f"{name}.toml").write_text(
        f'description = "{name}"\n[sources.sglang]\n{source}\npackage_dir = "python"\n'
        f"[patches]\nsglang = [{entries}]\n" + BENCH)
    return str(root / "recipes" / f"{name}.toml")


def test_bisect_finds_planted_regression_in_8_patches(mini, capsys):
    stack = []
    for i in range(1, 9):
        name = f"p{i}.patch"
        text = (_cost_patch(mini, "STEP_BASE_S = 0.012", "STEP_BASE_S = 0.020", "planted: slower step")
                if i == 5 else _new_file_patch(i))
        (mini / "patches" / name).write_text(text)
        stack.append(name)
    recipe = _recipe(mini, "stack8", stack)
    assert main(["bisect", recipe, "--metric", "output_tok_s@1", "--threshold", "10", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["culprit"] == 5 and out["culprit_label"] == "p5.patch"
    assert out["builds"] <= 5, out
    assert "patchbench bisect" in out["reproduce"]
    # Replay: every value comes from the store (cached per env key), no new run.
    assert main(["bisect", recipe, "--metric", "output_tok_s@1", "--threshold", "10", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["culprit"] == 5 and again["runs"] == 0


def test_attribute_two_patches_and_compare_identical(mini, capsys):
    (mini / "patches" / "fast.patch").write_text(
        _cost_patch(mini, "STEP_BASE_S = 0.012", "STEP_BASE_S = 0.008", "faster step"))
    (mini / "patches" / "slow.patch").write_text(
        _cost_patch(mini, "STEP_PER_SEQ_S = 0.00004", "STEP_PER_SEQ_S = 0.004", "slower per sequence",
                    after=(("STEP_BASE_S = 0.012", "STEP_BASE_S = 0.008"),)))
    recipe = _recipe(mini, "two", ["fast.patch", "slow.patch"])
    # the default sequential design: a step launched until its verdict is settled (2..16 each), so a
    # run slowed by a loaded box is outvoted instead of turning a 1.5x gain into "not significant"
    assert main(["attribute", recipe, "--metric", "output_tok_s@1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the miniature paces steps on deadlines: load only slows a run, so each prefix's best run is its speed
    base, after_fast, after_both = (max(v) for v in out["prefix_values"])
    assert after_fast > base * 1.2, out  # the fast patch helps
    assert after_both < after_fast * 0.9, out  # the slow one hurts
    assert "faster" in out["lines"][0] and "slower" in out["lines"][1]
    # the same stored runs as a table: launched until settled, every row is the sequential verdict (p column
    # "seq."), and only that rule is stated (not the fixed rule's Mann-Whitney legend beside it)
    assert main(["attribute", recipe, "--metric", "output_tok_s@1"]) == 0
    table = " ".join(capsys.readouterr().out.split())
    assert "every row: the sequential verdict of the values launched until settled" in table, table
    assert "Mann-Whitney" not in table and "seq." in table
    assert "0 new run(s)" in table

    a = _recipe(mini, "same-a", [])
    b = _recipe(mini, "same-b", [])
    assert main(["run", a, b, "--repeats", "4"]) == 0
    capsys.readouterr()
    # identical recipes never differ by a real effect: a 4 v 4 Mann-Whitney at alpha 5% over several
    # points may call a few-percent drift of a loaded box (the calibration benchmark measures that
    # rate); what a user relies on is that no identity mix-up shows as a 10% difference
    assert main(["compare", "same-a", "same-b", "--metric", "output_tok_s", "--min-effect", "0.1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows and all(r["verdict"] == "not significant" for r in rows), rows


def test_attribute_launches_a_base_stored_before_the_box_slowed_again_and_judges_only_this_campaign(
        mini, capsys, monkeypatch):
    """The audit's case: the base (prefix 0) was stored by an earlier campaign; the box then slowed every
    step by 15% (the miniature's SGLANG_MINI_BOX_SLOWDOWN, no part of the configuration) and `attribute`
    of a harmless patch (a comment) launched only the patched prefix against the stored base: "1.07x
    slower [1.01, 1.13]". Now the base launches again in this campaign, the step and the table read only
    the launches made together, and the step names the four stored runs it left out."""
    (mini / "patches" / "comment.patch").write_text(_cost_patch(
        mini, "# Fixed cost of one prefill (extend) step.", "# Fixed cost of one prefill (extend) step (a note).",
        "a comment"))
    base = _recipe(mini, "base", [])
    recipe = _recipe(mini, "comment", ["comment.patch"])
    assert main(["run", base, "--repeats", "4", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    stored = {rid for _, rid in first["runs"]}
    monkeypatch.setenv("SGLANG_MINI_BOX_SLOWDOWN", "1.15")
    assert main(["attribute", recipe, "--metric", "output_tok_s@1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (step,) = out["sequential"]
    assert step["left_out"] and step["left_out"][0].startswith("prefix0: 4 stored run(s) from another campaign")
    assert first["group_id"][:12] in step["left_out"][0] and "left out" in step["text"]
    probes = {p["label"]: p for p in out["values_from"]}
    again = [rid for rid in probes["prefix0"]["runs"] if rid not in stored]
    assert len(again) >= step["launches_each"] >= 2, probes  # the base launched again, beside the patch
    # the verdict is the pure rule over the launches made together (the stored four would read the box's 15%)
    from toolkit.analysis import sequential as seq

    a = [v for rid, v in zip(probes["prefix0"]["runs"], probes["prefix0"]["values"]) if rid not in stored]
    v = seq.verdict(a, probes["prefix1"]["values"], higher_is_better=True, design=seq.Design())
    assert step["text"].startswith(v.text), (step, v.text)
    if v.settled:  # the table reads the same launches
        assert seq.verdict_word(v) in out["lines"][0], out["lines"]


def test_upstream_bisect_skips_conflicting_commit(mini, capsys):
    up = mini / "mini"
    cost = up / COST
    # good -> c1 (harmless) -> c2 (rewrites the line the patch needs: conflict) -> c3 (restores it)
    #      -> c4 (slower step: the culprit) -> c5 (harmless)
    (mini / "patches" / "ours.patch").write_text(
        _cost_patch(mini, "PREFILL_BASE_S = 0.002", "PREFILL_BASE_S = 0.001", "our prefill tweak"))
    original = cost.read_text()
    (up / "README.md").write_text("c1\n"); git(up, "commit", "-qam", "c1 harmless")
    cost.write_text(original.replace("PREFILL_BASE_S = 0.002", "PREFILL_BASE_S = 0.0025")); git(up, "commit", "-qam", "c2 conflicts")
    cost.write_text(original); git(up, "commit", "-qam", "c3 restores")
    cost.write_text(original.replace("STEP_BASE_S = 0.012", "STEP_BASE_S = 0.024")); git(up, "commit", "-qam", "c4 slower")
    culprit = git(up, "rev-parse", "HEAD")
    (up / "README.md").write_text("c5\n"); git(up, "commit", "-qam", "c5 harmless")
    git(up, "tag", "bad")
    recipe = _recipe(mini, "up", ["ours.patch"], source='git = "../mini"\nrev = "good"')
    assert main(["bisect", recipe, "--metric", "output_tok_s@1", "--threshold", "10", "--source", "sglang",
                 "--good", "good", "--bad", "bad", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["culprit_label"] == culprit[:12], out


def _demo_project(tmp_path, monkeypatch, benchmark: str) -> None:
    """The shipped demo recipes and patches copied into a scratch project, with `benchmark` as the
    baseline's [benchmark] table (the variants extend it)."""
    root = tmp_path / "demo-proj"
    shutil.copytree(REPO_ROOT / "upstream" / "minisglang", root / "upstream" / "minisglang",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    shutil.copytree(REPO_ROOT / "patches" / "demo", root / "patches" / "demo")
    shutil.copytree(REPO_ROOT / "recipes" / "demo", root / "recipes" / "demo")
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(root / "recipes"))
    _set_benchmark(root, benchmark)
    return root


def _set_benchmark(root, benchmark: str) -> None:
    path = root / "recipes" / "demo" / "baseline.toml"
    text = path.read_text()
    head, rest = text.split("[benchmark]", 1)
    tail = rest[rest.index("\n[", 1):] if "\n[" in rest[1:] else "\n"
    path.write_text(head + "[benchmark]\n" + benchmark + tail)


def test_editing_the_benchmark_moves_compare_report_and_attribute_to_the_new_runs(tmp_path, home, monkeypatch,
                                                                                   capsys):
    old = 'driver = "serving"\ninput_len = 16\noutput_len = 8\nconcurrency = [1]\nnum_prompts = 3\nwarmup = 1\nrepeats = 4\n'
    root = _demo_project(tmp_path, monkeypatch, old)
    assert main(["run", "demo/baseline", "demo/fast", "--fixed"]) == 0
    _set_benchmark(root, old.replace("output_len = 8", "output_len = 16"))  # edit [benchmark], re-run
    assert main(["run", "demo/baseline", "demo/fast", "--fixed"]) == 0
    capsys.readouterr()

    assert main(["compare", "demo/baseline", "demo/fast", "--metric", "output_tok_s", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["rows"]
    # a 12 -> 8 ms step; at 4 v 4 Mann-Whitney says "faster" only when the two sets do not overlap at all,
    # which one launch slowed by CI's load undoes: the verdict is attribute's too (below), not asserted here
    assert row["n_base"] == row["n_variant"] == 4 and row["speedup"] > 1.1, row
    new_runs = set(row["base_runs"]) | set(row["variant_runs"])
    assert any("4 run(s)" in line for line in out["selection"])

    assert main(["report", "demo/baseline", "demo/fast", "--metric", "output_tok_s", "-o", str(tmp_path / "r")]) == 0
    md = (tmp_path / "r" / "report.md").read_text()
    fast_line = next(line for line in md.splitlines() if line.startswith("|") and "| demo/fast |" in line
                     and "x [" in line)
    assert f"{row['speedup']:.3f}x" in fast_line and "| 4 |" in fast_line, (fast_line, row)
    from toolkit.analysis import stats

    cell = stats.format_mean_std(row["base_mean"], row["base_std"], "tok/s").replace(" +- ", " ± ")
    assert any("| demo/baseline |" in line and cell in line and "| 4 |" in line for line in md.splitlines()), md

    # attribute reuses exactly the new runs (same env, benchmark and GPU kind): no new measurement
    capsys.readouterr()
    assert main(["attribute", "demo/fast", "--metric", "output_tok_s@1", "--repeats", "4", "--json"]) == 0
    att = json.loads(capsys.readouterr().out)
    assert att["runs"] == 0, att
    base_vals, fast_vals = att["prefix_values"]
    assert sum(base_vals) / 4 == pytest.approx(row["base_mean"]) and sum(fast_vals) / 4 == pytest.approx(row["variant_mean"])
    assert row["verdict"] in att["lines"][0] and f"{row['speedup']:.2f}x" in att["lines"][-1]  # the same verdict
    used = {v["label"]: set(v["runs"]) for v in att["values_from"]}
    assert used["prefix0"] == set(row["base_runs"]) and used["prefix1"] == set(row["variant_runs"])
    assert used["prefix0"] | used["prefix1"] == new_runs


def test_bisect_probes_record_the_design_they_were_launched_under(mini, capsys):
    """A sequential bisect's probes are launched until each step is settled, as `run`'s pairs are: each
    probe run records that design (`extra["sequential"]`), so compare judges two probes by the rule that
    launched them (the mixture sequence, the bisect's threshold as the zone), not by the default design."""
    (mini / "patches" / "h1.patch").write_text(_new_file_patch(1))
    (mini / "patches" / "slow.patch").write_text(
        _cost_patch(mini, "STEP_BASE_S = 0.012", "STEP_BASE_S = 0.020", "planted: slower step"))
    recipe = _recipe(mini, "rec", ["h1.patch", "slow.patch"])
    argv = ["bisect", recipe, "--metric", "output_tok_s@1", "--threshold", "10", "--max-repeats", "5", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["culprit_label"] == "slow.patch", out
    # the rule it decided with, and its error rate, with the settings given
    assert "anytime-valid 95% confidence sequence" in out["legend"] and "beyond 10% worse" in out["legend"]
    assert "up to 5 each" in out["legend"] and "<= 0.025" in out["legend"], out["legend"]
    assert main(["results", "--export", "json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    probes = [r for r in runs if r["recipe"].startswith("rec")]
    assert probes and all(r["extra"].get("sequential") for r in probes), [r["extra"].keys() for r in probes]
    design = probes[0]["extra"]["sequential"]
    assert design["method"] == "mixture" and design["min_effect"] == 0.1 and design["max_repeats"] == 5
    assert all(r["extra"]["sequential"] == design for r in probes)
    # compare of the convicted pair judges it by the bisect's own rule (its anytime-valid sequence, the
    # threshold as the zone), not by `run`'s default Pocock design
    labels = {r["recipe"].rpartition("@")[2] if "@" in r["recipe"] else "whole": r["recipe"] for r in probes}
    assert main(["compare", labels["prefix1"], labels["whole"], "--metric", "output_tok_s", "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    [row] = cmp["rows"]
    assert row["launched_under"] == design, row
    assert "pairs launched until settled" in cmp["legend"] and "anytime-valid" in cmp["legend"], cmp["legend"]
    assert "min_effect" in cmp["legend"] and "at least 10%" in cmp["legend"], cmp["legend"]
    # a replay still reuses every stored value (the design is no part of the run identity)
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 0


LAUNCH = "python/sglang/launch_server.py"
CRASH = ("    launch_server(server_args)", "    raise SystemExit('planted crash')\n    launch_server(server_args)")


def test_bisect_names_its_skipped_probe_and_links_every_value_to_its_runs(mini, capsys, home):
    """A probe whose server crashes is skipped (git bisect's 125), and the answer says which, why and where its
    log is; every value the verdict used is linked to its runs, in the JSON and the text."""
    (mini / "patches" / "h1.patch").write_text(_new_file_patch(1))
    (mini / "patches" / "crash.patch").write_text(_edit_patch(mini, LAUNCH, *CRASH, "crash the server"))
    (mini / "patches" / "uncrash.patch").write_text(_edit_patch(mini, LAUNCH, CRASH[1], CRASH[0], "fix it",
                                                                after=(CRASH,)))
    (mini / "patches" / "slow.patch").write_text(
        _cost_patch(mini, "STEP_BASE_S = 0.012", "STEP_BASE_S = 0.020", "planted: slower step"))
    recipe = _recipe(mini, "crashy", ["h1.patch", "crash.patch", "uncrash.patch", "slow.patch"])
    argv = ["bisect", recipe, "--metric", "output_tok_s@1", "--threshold", "10", "--max-repeats", "4"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["culprit_label"] == "slow.patch", out
    assert [s["outcome"] for s in out["steps"] if s["label"] == "crash.patch"] == ["skip"], out["steps"]
    why = out["skipped"]["prefix2"]
    assert "server exited with code 1" in why and "(log: " in why, why
    log = why.split("(log: ")[1].rstrip(")")
    assert "planted crash" in Path(log).read_text()
    probes = {p["label"]: p for p in out["probes"]}
    assert set(probes) == {"prefix0", "prefix3", "prefix4"}, probes
    # the conviction's values are each probe's latest, those measured together with the other's
    good, bad = out["good_values"], out["bad_values"]
    assert probes["prefix3"]["values"][-len(good):] == good and probes["prefix4"]["values"][-len(bad):] == bad
    assert all(len(p["run_ids"]) == len(p["values"]) for p in probes.values())
    # the text says the same: the skipped probe with its log, and the runs of every value used
    assert main(argv) == 0
    text = capsys.readouterr().out
    # (the replay of the finished bisect meets the crash its sweep recorded, launching nothing; `--fresh` launches
    # the crashing probe again: a crash may be the box's, not the probe's)
    assert "skipped: prefix2: run " in text and "server exited with code 1 (log: " in text, text
    assert "0 new run(s)" in text, text
    assert "runs used: prefix3" in text and probes["prefix3"]["run_ids"][0][:8] in text, text


def test_a_bisect_whose_base_cannot_be_measured_says_why_and_where_its_log_is(mini, capsys):
    """The known-good end itself crashes: the one-line error names the recipe, the step, why (the failed
    run) and the server log, not only "the base could not be measured"."""
    launch = mini / "mini" / LAUNCH
    launch.write_text(launch.read_text().replace(*CRASH))
    git(mini / "mini", "commit", "-qam", "upstream crashes")
    (mini / "patches" / "uncrash.patch").write_text(_edit_patch(mini, LAUNCH, CRASH[1], CRASH[0], "fix it"))
    recipe = _recipe(mini, "basecrash", ["uncrash.patch"])
    capsys.readouterr()
    assert main(["bisect", recipe, "--metric", "output_tok_s@1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: recipe basecrash: step bisect: the base (base) could not be measured: run "), err
    assert "server exited with code 1 (log: " in err, err
    assert "planted crash" in Path(err.split("(log: ")[1].rstrip(")")).read_text()
