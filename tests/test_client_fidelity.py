"""The real-sglang fidelity check's verdict (benchmarks/client_fidelity.py --real): a box whose
rounds swing more than the tolerance says "unresolved", never "outside" (which would blame the
client for the box's noise) nor "within"."""

from __future__ import annotations

import random

from conftest import REPO_ROOT


def _verdict(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO_ROOT / "benchmarks"))
    from client_fidelity import paired_verdict

    return paired_verdict


def test_the_rounds_measured_on_this_box_are_unresolved_not_a_client_error(monkeypatch):
    paired_verdict = _verdict(monkeypatch)
    # c=1 on the idle 2-core box, 2026-12-02: both clients swing 1.7-1.8x from round to round
    v = paired_verdict([78.6, 144.0, 88.4], [134.3, 101.5, 175.0], 2.0)
    assert v["verdict"] == "unresolved" and v["low"] < 0.98 and v["high"] > 1.02
    assert 1.8 < v["swing_ours"] < 1.9 and 1.7 < v["swing_theirs"] < 1.8
    assert paired_verdict([100.0], [100.0], 2.0)["verdict"] == "unresolved"  # one round: no interval


def test_quiet_rounds_settle_within_or_outside(monkeypatch):
    paired_verdict = _verdict(monkeypatch)
    rng = random.Random(3)
    drift = [rng.uniform(0.7, 1.3) for _ in range(5)]  # the box's drift falls on both sides of a pair
    same = [100 * d * rng.gauss(1, 0.002) for d in drift]
    assert paired_verdict(same, [100 * d for d in drift], 2.0)["verdict"] == "within"
    slow = [0.9 * 100 * d * rng.gauss(1, 0.002) for d in drift]
    v = paired_verdict(slow, [100 * d for d in drift], 2.0)
    assert v["verdict"] == "outside" and 0.88 < v["ratio"] < 0.92
