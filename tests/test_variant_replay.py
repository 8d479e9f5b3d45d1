"""attribute/bisect replays (issue 29): a replay takes its values under the rule the first
measurement used, so a variant whose runs were stored invalid (missing activation evidence) is left
out of both, or, with --missing-evidence, counted in both and never measured again."""

from __future__ import annotations


from conftest import cli_json, demo_project
from toolkit.results.store import Store

SHORT = '[benchmark]\nconcurrency = [1]\nrepeats = 1\nnum_prompts = 4\noutput_len = 8\n'
NOPROOF = ('extends = "demo/fast"\n[evidence."demo/faster-decode.patch"]\nlog = "this line is never printed"\n'
           + SHORT)


def test_a_replay_decides_as_the_first_measurement_did(tmp_path, home, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/t").mkdir()
    (proj / "recipes/t/noproof.toml").write_text(NOPROOF)
    argv = ["attribute", "t/noproof", "--repeats", "2"]
    rc, first = cli_json(capsys, argv)
    store = Store(home / "results.sqlite")
    invalid = [r for r in store.runs(recipe="t/noproof") if r.status == "invalid"]
    # the whole stack: no evidence, so its patch is not attributed: exit 1, the reason in `unmeasured`
    assert rc == 1 and len(invalid) == 1 and invalid[0].missing_evidence
    assert len(first["unmeasured"]) == 1 and first["unmeasured"][0].startswith("prefix 1 (+demo/faster-decode.patch)")
    assert first["prefix_values"][0] and len(first["prefix_values"][0]) == 2 and first["prefix_values"][1] is None
    assert first["runs"] == 3  # two of the base, one of the stack (stored invalid: no value, no more runs)
    rc, again = cli_json(capsys, argv)
    assert rc == 1 and again["prefix_values"] == first["prefix_values"] and again["lines"] == first["lines"]
    assert again["runs"] == 1  # the base's values reused; the stack measured again, invalid again

    # with --missing-evidence the invalid runs count in the first measurement and in the replay alike
    rc, wide = cli_json(capsys, [*argv, "--missing-evidence"])
    assert rc == 0 and len(wide["prefix_values"][1]) == 2 and wide["prefix_values"][0] == first["prefix_values"][0]
    assert wide["runs"] == 0  # the two invalid runs stored above are this variant's values
    rc, replay = cli_json(capsys, [*argv, "--missing-evidence"])
    assert rc == 0 and replay["runs"] == 0
    assert replay["prefix_values"] == wide["prefix_values"] and replay["lines"] == wide["lines"]
    ids = {v["label"]: v["runs"] for v in replay["values_from"]}
    assert set(ids["prefix1"]) == {r.run_id for r in store.runs(recipe="t/noproof") if r.status == "invalid"}
