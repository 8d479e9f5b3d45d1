"""The Pocock levels a verdict uses are the simulation's numbers, whether shipped, kept or simulated now."""

from __future__ import annotations

import json

from toolkit.analysis import sequential_level as level
from toolkit.analysis import sequential_level_cache as cache


def test_the_shipped_table_is_this_codes_simulation():
    table = json.loads(cache.SHIPPED.read_text())
    assert table["code"] == cache.code_hash(), (
        "toolkit/data/sequential_levels.json was simulated by other code: "
        "python -m toolkit.analysis.sequential_level writes it again")
    assert set(table["levels"]) == {cache.key(a) for a in cache.shipped_args()}
    # the default design's levels (two-sided and TOST's one-sided), simulated again here
    for args in ((0.05, 2, 8, 0, 0, 0, 2), (0.05, 2, 8, 0, 0, 0, 1)):
        assert table["levels"][cache.key(args)] == level.simulated_level(*args)


def test_an_edited_comment_keeps_the_levels_and_an_edited_line_of_code_does_not():
    """The levels are a function of the code, not of its comments: a comment or blank line edited in
    noise_prior.py keeps the shipped table (it used to invalidate it, and every verdict simulated its levels
    again); a changed constant does not."""
    from pathlib import Path

    src = (Path(cache.__file__).parent / "noise_prior.py").read_bytes()
    same = src.replace(b"\nMAX_DOF", b"\n# a note\n\nMAX_DOF", 1).replace(b"  # the largest prior", b"  # the biggest prior")
    assert cache._code_tokens(same) == cache._code_tokens(src)
    first = src.index(b"= ", src.index(b"\nMAX_DOF"))
    changed = src[:first] + b"= 1 + " + src[first + 2:]
    assert cache._code_tokens(changed) != cache._code_tokens(src)


def test_a_level_outside_the_table_is_simulated_once_and_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    args = (0.05, 2, 4, 6, 0, 0, 2)  # a stored-spread prior of 6 df: not shipped
    assert cache.lookup(args) is None
    simulated = []  # what each simulation nominal_level ran returned (a simulation is ~1 CPU-s here)
    simulate = level.simulated_level
    monkeypatch.setattr(level, "simulated_level", lambda *a: simulated.append(simulate(*a)) or simulated[-1])
    value = level.nominal_level.__wrapped__(*args)
    assert simulated == [value]  # the simulation's own number, simulated once
    kept = tmp_path / "patchbench" / "sequential-levels" / cache.code_hash() / cache.key(args)
    assert kept.is_file() and cache.lookup(args) == value
    assert level.nominal_level.__wrapped__(*args) == value and len(simulated) == 1  # kept: read, not simulated
    kept.write_text("half a numb")  # damaged: simulated again, never read as a level
    assert cache.lookup(args) is None
    assert level.nominal_level.__wrapped__(*args) == value and cache.lookup(args) == value
    assert simulated == [value, value]
