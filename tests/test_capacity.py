"""What the server could hold (toolkit.results.capacity): a recipe whose launches were sized apart,
and a concurrency above the server's running limit, said beside compare's other server lines."""

from __future__ import annotations

import json
from types import SimpleNamespace

from conftest import demo_project
from toolkit.cli import main
from toolkit.results import capacity


def _run(rid, capacity_tokens, limit, points=(1, 8)):
    """A stored run's fields as sglang 0.5.23's /server_info gives them (internal_states per DP rank)."""
    states = [{"memory_usage": {"token_capacity": capacity_tokens}, "effective_max_running_requests_per_dp": limit}]
    return SimpleNamespace(run_id=rid, recipe="r", server_info={"internal_states": states},
                           bench_params={"points": list(points)}, bench_driver="serving")


def test_launches_sized_apart_and_points_above_the_limit_are_said():
    runs = [_run("a", 8192, 16), _run("b", 7936, 16)]
    (line,) = capacity.lines(runs)
    assert "r: its 2 launches reported different KV capacities (7,936, 8,192)" in line and "max-total-tokens" in line
    assert capacity.lines([_run("a", 8192, 16), _run("b", 8192, 16)]) == []
    (over,) = capacity.lines([_run("a", 8192, 4)])
    assert over.startswith("r: concurrency 8 above the 4 requests the server runs at once")
    assert capacity.of(SimpleNamespace(server_info=None)) == {"token_capacity": None, "max_running_requests": None}


def test_compare_says_a_point_above_the_servers_running_limit(tmp_path, home, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    short = ('[benchmark]\nconcurrency = [1, 4]\nrepeats = 1\nnum_prompts = 8\noutput_len = 8\n'
             '[quality]\nlaunches = 0\n')
    (proj / "recipes/mine").mkdir()
    for name, parent in (("a", "demo/baseline"), ("b", "demo/fast")):
        (proj / f"recipes/mine/{name}.toml").write_text(
            f'extends = "{parent}"\n[server.args]\nmax-running-requests = 2\nmax-total-tokens = 4096\n' + short)
    assert main(["run", "mine/a", "mine/b", "--fixed", "--repeats", "1"]) == 0
    capsys.readouterr()
    assert main(["compare", "mine/a", "mine/b", "--json"]) == 0
    lines = json.loads(capsys.readouterr().out)["server"]
    assert any(ln.startswith("mine/a: concurrency 4 above the 2 requests the server runs at once") for ln in lines), lines
