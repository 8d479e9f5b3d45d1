"""A bisect reads only its own campaign's launches (toolkit.analysis.search_campaign): a probe's stored
runs from another campaign (a `run` of the base before the box slowed) are left out of its looks and
named, the probe launches again here; a killed bisect asked again continues its own campaign."""

from __future__ import annotations

import json

from conftest import cli_json, demo_project, interrupt_launches_after
from toolkit.results.store import Store

BENCH = ('[benchmark]\nconcurrency = [1]\ninput_len = 16\noutput_len = 8\nnum_prompts = 4\nwarmup = 1\n'
         'repeats = 4\n[quality]\nlaunches = 0\n')


def _harmless_stack(root, n: int = 3) -> None:
    """t/base (demo/baseline, a small benchmark) and t/stack: it with `n` patches that change nothing
    the server runs (each adds a module nothing imports)."""
    (root / "patches" / "t").mkdir(parents=True)
    for i in range(1, n + 1):
        (root / "patches" / "t" / f"note{i}.patch").write_text(
            f"Subject: t: harmless note {i}\n\ndiff --git a/python/sglang/note{i}.py b/python/sglang/note{i}.py\n"
            f"new file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/python/sglang/note{i}.py\n"
            f"@@ -0,0 +1 @@\n+NOTE = {i}\n")
    (root / "recipes" / "t").mkdir()
    (root / "recipes" / "t" / "base.toml").write_text('extends = "demo/baseline"\n' + BENCH)
    patches = ", ".join(f'"t/note{i}.patch"' for i in range(1, n + 1))
    (root / "recipes" / "t" / "stack.toml").write_text(f'extends = "demo/baseline"\n[patches]\nsglang = [{patches}]\n'
                                                       + BENCH)


BISECT = ["bisect", "t/stack", "--metric", "output_tok_s@1"]


def test_a_base_stored_before_the_box_slowed_is_launched_again_not_a_false_culprit(tmp_path, home, monkeypatch,
                                                                                   capsys):
    """`run t/base` stores four launches; the box then slows every step by 15%. Bisecting the stack of
    harmless patches read the stored base against today's probes and named the first patch the culprit
    ("1.08x slower" at an 8% shift); now the base launches again in the bisect, no culprit is named,
    and the JSON and text name the four runs left out with their sweep."""
    root = demo_project(tmp_path, monkeypatch)
    _harmless_stack(root)
    rc, first = cli_json(capsys, ["run", "t/base", "--repeats", "4"])
    assert rc == 0
    stored = [rid for _, rid in first["runs"]]
    monkeypatch.setenv("SGLANG_MINI_BOX_SLOWDOWN", "1.15")
    rc, out = cli_json(capsys, BISECT)
    assert rc == 0 and out["culprit"] is None, out["message"]
    assert out["message"].startswith("no item makes the metric worse")
    base = next(p for p in out["probes"] if p["label"] == "prefix0")
    assert not set(base["run_ids"]) & set(stored) and len(base["run_ids"]) >= 2  # launched again, here
    assert base["reused"] == stored
    line = out["left_out"]["prefix0"]
    assert line.startswith("prefix0: 4 stored run(s) from another campaign") and first["group_id"][:12] in line
    store = Store(home / "results.sqlite")
    groups = {r.group_id for p in out["probes"] for r in store.runs(run_ids=p["run_ids"])}
    assert len(groups) == 1 and first["group_id"][:12] not in groups  # every value from this bisect's sweep
    from toolkit.cli import main

    assert main(BISECT) == 0  # the text says it too
    text = capsys.readouterr().out
    assert "left out: prefix0: 4 stored run(s) from another campaign" in text.replace("\n", " ")


def test_a_killed_bisect_asked_again_continues_its_own_campaign(tmp_path, home, monkeypatch, capsys):
    """The bisect is killed after its third launch; asked again, it continues that sweep (its runs are
    values, nothing is left out, no launch is repeated), while a different search (another threshold)
    is another campaign and launches its probes again."""
    import toolkit.run.pipeline as pipeline
    from toolkit.cli import main

    root = demo_project(tmp_path, monkeypatch)
    _harmless_stack(root)
    real, launched = pipeline.run_once, interrupt_launches_after(monkeypatch, 3)
    assert main([*BISECT, "--json"]) != 0
    capsys.readouterr()
    monkeypatch.setattr(pipeline, "run_once", real)
    rc, out = cli_json(capsys, BISECT)
    assert rc == 0 and out["culprit"] is None and not out["left_out"], out
    used = [rid for p in out["probes"] for rid in p["run_ids"]]
    assert set(launched) <= set(used) and out["runs"] == len(used) - 3
    store = Store(home / "results.sqlite")
    assert len({r.group_id for r in store.runs(run_ids=used)}) == 1  # one sweep: the killed call's
    rc, other = cli_json(capsys, [*BISECT, "--threshold", "10"])
    assert rc == 0 and other["left_out"]["prefix0"].startswith("prefix0: ")
    assert not {rid for p in other["probes"] for rid in p["run_ids"]} & set(used)
    json.dumps(other)


ONE = ["bisect", "t/stack", "--metric", "output_tok_s@1", "--max-repeats", "3"]


def test_a_finished_bisect_asked_again_replays_its_sweep_and_never_launches_into_it(tmp_path, home, monkeypatch,
                                                                                    capsys):
    """A finished bisect asked again joined its sweep for good: after its patch was edited (another
    harmless note) and the box slowed 15%, only the edited probe launched, read against the base the
    first call measured, and the harmless patch was "the culprit, 1.13x slower". Now a finished sweep is
    replayed (nothing launched, it says so and offers --fresh); one that cannot answer without a launch
    is measured again in a new campaign, the base with it (as `--fresh` asks)."""
    from toolkit.cli import main

    root = demo_project(tmp_path, monkeypatch)
    _harmless_stack(root, 1)
    rc, first = cli_json(capsys, ONE)
    assert rc == 0 and first["replayed"] is None and first["runs"] >= 4, first
    ids = {p["label"]: p["run_ids"] for p in first["probes"]}
    assert main([*ONE, "--json"]) == 0  # asked again: the same answer from the same runs, nothing launched
    cap = capsys.readouterr()
    again = json.loads(cap.out)
    assert again["runs"] == 0 and again["sweep"] == first["sweep"] and again["replayed"], again
    assert {p["label"]: p["run_ids"] for p in again["probes"]} == ids and again["steps"] == first["steps"]
    assert f"replaying sweep {first['sweep']} of this search, finished" in cap.err and "--fresh" in cap.err
    patch = root / "patches" / "t" / "note1.patch"
    patch.write_text(patch.read_text().replace("+NOTE = 1", "+NOTE = 11"))
    monkeypatch.setenv("SGLANG_MINI_BOX_SLOWDOWN", "1.15")
    assert main([*ONE, "--json"]) == 0
    cap = capsys.readouterr()
    edited = json.loads(cap.out)
    assert f"sweep {first['sweep']} of this search (finished " in cap.err and "measuring again in a new campaign" in cap.err
    assert edited["sweep"] != first["sweep"] and edited["replayed"] is None
    store = Store(home / "results.sqlite")
    probes = {p["label"]: p for p in edited["probes"]}
    assert {r.group_id for p in probes.values() for r in store.runs(run_ids=p["run_ids"])} == {edited["sweep"]}
    assert probes["prefix0"]["reused"] == ids["prefix0"] and len(probes["prefix0"]["run_ids"]) >= 2  # base again
    # (`--fresh` is this new campaign asked for: the same call, `fresh=True`, without a replay first)


def test_a_killed_bisect_another_process_is_continuing_is_not_launched_into_twice(tmp_path, home, monkeypatch,
                                                                                   capsys):
    """Two calls of the same killed bisect both continued its sweep, with no lease (`run` takes one), so
    both could launch the same probe into it. Now a call continues a sweep only under its lease: while
    another process holds it, this call measures in a new sweep and says so."""
    import toolkit.run.pipeline as pipeline
    from toolkit.cli import main

    root = demo_project(tmp_path, monkeypatch)
    _harmless_stack(root, 1)
    real, launched = pipeline.run_once, interrupt_launches_after(monkeypatch, 1)
    assert main([*ONE, "--json"]) != 0
    capsys.readouterr()
    monkeypatch.setattr(pipeline, "run_once", real)
    store = Store(home / "results.sqlite")
    killed = store.get_run(launched[0]).group_id
    with store.lease(f"group-{killed}") as held:  # another process continuing it now
        assert held
        assert main([*ONE, "--json"]) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert f"sweep {killed} of this search is being measured by another process now" in cap.err
    assert out["sweep"] != killed and out["left_out"]["prefix0"].startswith("prefix0: 1 stored run(s)"), out
    assert launched[0] not in {rid for p in out["probes"] for rid in p["run_ids"]}


def test_a_replayed_bisect_never_says_it_launched_a_probe_again(tmp_path, home, monkeypatch, capsys):
    """A finished bisect asked again after a `run` of its base: the replay launched nothing ("0 new run(s)")
    yet said of the base's stored run from that other campaign "left out: prefix0: ...; launched again in
    this bisect". Now the replay says those runs were not read by the replay of its sweep, nothing launched."""
    from toolkit.cli import main

    root = demo_project(tmp_path, monkeypatch)
    _harmless_stack(root, 1)
    rc, first = cli_json(capsys, ONE)
    assert rc == 0 and first["replayed"] is None, first
    assert main(["run", "t/base", "--fixed", "--repeats", "1"]) == 0
    capsys.readouterr()
    assert main(ONE) == 0
    cap = capsys.readouterr()
    text = " ".join(cap.out.split())
    assert "replaying sweep" in cap.err and "0 new run(s)" in text, text
    assert "left out: prefix0: 1 stored run(s) from another campaign" in text, text
    assert "launched again in this bisect" not in text
    assert f"not read by this replay of sweep {first['sweep']} (its own launches answer; nothing launched)" in text


def test_a_probe_that_cannot_be_built_costs_no_launch_of_its_reference(tmp_path, home, monkeypatch, capsys):
    """Step 2 compares the last patch (it does not apply) with note2, found good in step 1 against the base.
    The reference was launched just before the probe (r p p r) and only then the probe was prepared: its
    apply failed, and that launch of note2 was spent on nothing (prefix2: 3 values, step 1 read 2, and a real
    build would have separated "the launch just before" from the probe's first by the build's minutes). Now a
    probe is prepared before its reference's launch: a probe that cannot be built launches nothing."""
    root = demo_project(tmp_path, monkeypatch)
    _harmless_stack(root)
    (root / "patches" / "t" / "note3.patch").write_text(
        "Subject: t: does not apply\n\ndiff --git a/python/sglang/absent.py b/python/sglang/absent.py\n"
        "--- a/python/sglang/absent.py\n+++ b/python/sglang/absent.py\n@@ -1 +1 @@\n-X = 1\n+X = 2\n")
    rc, out = cli_json(capsys, [*BISECT, "--threshold", "25"])
    assert rc == 1 and out["culprit"] is None and "could not be measured" in out["message"], out["message"]
    assert [s["outcome"] for s in out["steps"]] == ["good", "skip"], out["steps"]
    assert "does not apply" in out["skipped"]["prefix3"]
    probes = {p["label"]: p for p in out["probes"]}
    assert set(probes) == {"prefix0", "prefix2"}
    step = out["steps"][0]
    assert step["reference"] == "base" and f"n={step['n']}/{step['n_reference']}:" in step["line"], step
    assert len(probes["prefix2"]["run_ids"]) == step["n"], (step["line"], probes["prefix2"])
    assert out["runs"] == sum(len(p["run_ids"]) for p in probes.values())


def _crash_launch(monkeypatch, which: int) -> list[int]:
    """The `which`-th launch of `toolkit.run.pipeline.run_once` from now crashes its server (a CUDA error at the first
    step); returns the launch counter (set it back to 0 to count again)."""
    import os

    import toolkit.run.pipeline as pipeline

    real, n = pipeline.run_once, [0]

    def crashing(*a, **kw):
        n[0] += 1
        if n[0] == which:
            os.environ["SGLANG_MINI_CRASH_AFTER_REQUESTS"] = "0"
        try:
            return real(*a, **kw)
        finally:
            os.environ.pop("SGLANG_MINI_CRASH_AFTER_REQUESTS", None)

    monkeypatch.setattr(pipeline, "run_once", crashing)
    return n


def test_a_replay_meets_a_failed_launch_where_the_first_call_met_it(tmp_path, home, monkeypatch, capsys):
    """The base's launch after the probe's two (r p p r) crashes; the bisect goes on with the base's later launches.
    Its replay handed the stored values of the base oldest first, skipping the failure: the base's later launch
    took the crashed one's place (a look with a value the first call did not have), and the replay never met the
    failure the first call met. Now a replay hands the sweep's runs in launch order, the failure where it was:
    the same steps, the same failed launch, the same runs, nothing launched."""
    import toolkit.run.pipeline as pipeline
    from toolkit.cli import main

    root = demo_project(tmp_path, monkeypatch)
    _harmless_stack(root, 1)
    real = pipeline.run_once
    _crash_launch(monkeypatch, 5)
    rc, first = cli_json(capsys, ONE)
    assert rc == 0 and list(first["failed_launches"]) == ["prefix0"], first["failed_launches"]
    monkeypatch.setattr(pipeline, "run_once", real)
    assert main([*ONE, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["replayed"] and again["runs"] == 0, again
    assert again["failed_launches"] == first["failed_launches"] and again["steps"] == first["steps"]
    assert again["probes"] == first["probes"] and again["message"] == first["message"]


def test_a_failed_top_up_of_a_measured_probe_is_a_failed_launch_not_a_skip(tmp_path, home, monkeypatch, capsys):
    """The base's launch after the probe's two (r p p r) crashes. The bisect goes on with the base's other
    launches, but the JSON and text said "skipped: prefix0: run ... failed" (a probe that gave no value) for a
    base with four values. Now it is a failed launch of that probe, its other values counted."""
    from toolkit.cli import main

    root = demo_project(tmp_path, monkeypatch)
    _harmless_stack(root, 1)
    n = _crash_launch(monkeypatch, 5)  # the fifth launch: the base's after prefix1's two
    rc, out = cli_json(capsys, ONE)
    assert rc == 0, out["message"]  # (a harmless patch; on a loaded box its step may stay uncertain at the cap)
    probes = {p["label"]: p for p in out["probes"]}
    assert len(probes["prefix0"]["values"]) >= 3 and out["skipped"] == {}, out["skipped"]
    [why] = out["failed_launches"]["prefix0"]
    assert why.startswith("run ") and " failed: " in why and "(log: " in why, why
    n[0] = 0  # the text says the same, in a new campaign whose fifth launch crashes too
    assert main([*ONE, "--fresh"]) == 0
    text = capsys.readouterr().out
    assert "failed launch: prefix0: run " in text and "(its other values count)" in text and "skipped:" not in text, text
