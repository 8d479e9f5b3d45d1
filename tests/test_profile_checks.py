"""Profile runs are checked like any run: /server_info and the patches' activation evidence; a failed
check stores the profile run `invalid` with its reason, marked `"kind": "profile"`. The demo's
roofline describes the miniature itself, so its floors are below the measured times."""

from __future__ import annotations

import re

import pytest

from conftest import demo_project
from toolkit.cli import main
from toolkit.results.store import Store


@pytest.mark.slow
def test_profile_checks_evidence_and_the_demo_floors_are_below_the_measurement(tmp_path, home, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "mine").mkdir()
    (proj / "recipes" / "mine" / "wrong-proof.toml").write_text(
        'extends = "demo/torch-small-experts"\n'
        '[evidence."demo/small-experts.patch"]\nlog = "torch step: .*expert_intermediate=4096\\\\b"\n')

    assert main(["profile", "demo/torch-small-experts", "--steps", "10"]) == 0
    out = capsys.readouterr().out
    pcts = [float(x) for x in re.findall(r"vs floor [\d.]+ ms: ([\d.]+)%", out)]
    assert pcts and all(0 < p < 100 for p in pcts), out
    assert "inputs do not describe" not in out
    assert "minisglang-torch-step-small-experts on cpu-2core, TP1 from /server_info" in out  # the resolved layout

    assert main(["profile", "mine/wrong-proof", "--steps", "10"]) == 1
    assert "stored INVALID" in capsys.readouterr().err

    store = Store(home / "results.sqlite")
    [good] = store.runs(recipe="demo/torch-small-experts")
    assert good.status == "ok" and good.extra["kind"] == "profile"
    assert good.extra["evidence"] == {"demo/small-experts.patch": "ok"}
    assert good.extra["static_check_outcome"] == "ok"
    [bad] = store.runs(recipe="mine/wrong-proof")
    assert bad.status == "invalid" and bad.extra["kind"] == "profile"
    assert bad.error.startswith("activation evidence missing: demo/small-experts.patch")
    assert bad.extra["evidence"] == {"demo/small-experts.patch": "missing"}
