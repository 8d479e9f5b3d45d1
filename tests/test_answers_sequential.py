"""The answers verdict looked at launch by launch (toolkit.analysis.answers_sequential): what stops
asking, what asks again, and a legend that prints the parameters it computes with."""

from __future__ import annotations

from toolkit.analysis import answers_sequential as sa
from toolkit.analysis.answers_verdict import CHANGED, SAME, TOO_FEW, Launch


def _launch(rid, answers):
    return Launch(rid, tuple(tuple(a) for a in answers), (None,) * len(answers))


BASE = [[i, i + 1] for i in range(40)]


def _with(changes: dict):
    out = [list(a) for a in BASE]
    for p, a in changes.items():
        out[p] = a
    return out


REF = [_launch("r1", BASE), _launch("r2", _with({p: [900, p] for p in range(8)}))]  # varies on 8 prompts


def test_identical_answers_settle_same_at_the_first_look():
    v = sa.judge(1, REF, [_launch("c1", BASE)])
    assert v.verdict == SAME and v.settled and v.looks == 1 and not sa.more_needed(v)
    assert "at look 1 of at most 4" in v.text


MIX = {p: [900, p] for p in range(4)}  # a candidate that gives each of the reference's answers on its unstable prompts


def test_changed_answers_are_called_changed_at_their_share_of_alpha():
    changed = _launch("c1", _with({**MIX, **{p: [7, 7] for p in range(10, 26)}}))
    v = sa.judge(1, REF, [changed])
    assert v.verdict == CHANGED and v.looks == 1 and v.p_value < sa.Design().look_alpha and not sa.more_needed(v)


def test_an_unclear_look_asks_another_launch_and_the_cap_settles_it():
    # departs on 8 stable prompts: p between alpha/4 and the futility bound at one look
    one = _with({**MIX, **{p: [5, 5] for p in range(10, 18)}})
    v = sa.judge(1, REF, [_launch("c1", one)])
    assert sa.Design().look_alpha <= v.p_value < sa.DEFAULT_FUTILITY, v.text
    assert v.verdict == sa.UNSETTLED and not v.settled and sa.more_needed(v) and "after 1 look of at most 4" in v.text
    # the same departure in every launch: changed by the second look
    v = sa.judge(1, REF, [_launch(f"c{i}", one) for i in range(2)])
    assert v.verdict == CHANGED and v.looks == 2
    # with one look planned, the first look is the last: same answers (no look below alpha)
    v = sa.judge(1, REF, [_launch("c1", one)], sa.Design(max_looks=1))
    assert v.verdict == SAME and v.settled and "no look below 0.05" in v.text
    # (a verdict that stopped for futility at p >= 0.2 can miss what a second look would have found:
    # the calibration's power rows say how often)


def test_a_reference_with_one_launch_waits_for_its_own_not_the_candidates():
    """Too few reference launches: the candidate asks up to min_looks, then waits (its own further
    launches cannot give the reference its floor)."""
    v = sa.judge(1, REF[:1], [_launch("c1", BASE)])
    assert v.verdict == TOO_FEW and v.looks == 1 and not sa.more_needed(v)
    assert sa.more_needed(v, sa.Design(min_looks=2))
    assert sa.more_needed(sa.judge(1, REF[:1], [_launch("c1", BASE)], sa.Design(min_looks=2)), sa.Design(min_looks=2))


def test_the_legend_is_the_designs():
    text = sa.legend(sa.Design(alpha=0.1, max_looks=5, futility=0.3))
    assert "p < 0.02" in text and "split over 5 looks" in text and "p >= 0.3" in text
    assert sa.judge(1, REF, [_launch("c1", BASE)], sa.Design(max_looks=5)).rule == sa.legend(sa.Design(max_looks=5))
