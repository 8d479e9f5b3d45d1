"""The static check is remembered per (env, server arguments, target): a repeat is free, any
change in the arguments runs the real check again."""

from __future__ import annotations

import dataclasses
import shutil
import time

from conftest import REPO_ROOT
from toolkit.run.check_cache import cached_check_recipe
from toolkit.run.pipeline import prepare
from toolkit.recipe.load import load_recipe

RECIPE = """
description = "check cache"
[sources.sglang]
path = "../mini"
package_dir = "python"
[server]
model = "mini"
gpus = 0
[server.args]
tp-size = 8
ep-size = 8
[expect]
ep_size = 8
"""


def test_a_repeated_static_check_is_free_and_new_arguments_run_again(tmp_path, home):
    root = tmp_path / "proj"
    shutil.copytree(REPO_ROOT / "upstream" / "minisglang", root / "mini",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    (root / "recipes").mkdir()
    path = root / "recipes" / "cc.toml"
    path.write_text(RECIPE)
    recipe = load_recipe(path)
    first = prepare(recipe, home, until="check")
    assert first.check.ok and first.check.fields["ep_size"] == 8

    assert len(list((home / "checks").glob("*.json"))) == 1
    second = prepare(recipe, home, until="check")
    assert second.env.reused and second.timings["check"] < 1.0
    assert second.check == first.check
    assert len(list((home / "checks").glob("*.json"))) == 1

    other = dataclasses.replace(recipe, server=dataclasses.replace(recipe.server, args=(("tp-size", 4), ("ep-size", 4))),
                                expect={})
    check, reused = cached_check_recipe(first.env, other, tmp_path / "w1", home)
    assert not reused and check.fields["ep_size"] == 4
    t0 = time.monotonic()
    again, reused = cached_check_recipe(first.env, other, tmp_path / "w2", home)
    assert reused and again == check and time.monotonic() - t0 < 1.0
    assert len(list((home / "checks").glob("*.json"))) == 2
