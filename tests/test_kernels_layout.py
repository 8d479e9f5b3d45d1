"""`kernels --shapes model` takes TP/EP as sglang resolves the recipe's arguments (its static
resolution in the recipe's env: no server runs), not as the flags read: `--tp-size 2
--moe-a2a-backend deepep` is EP2 (sglang sets ep_size to tp_size for the all-to-all backends; the
miniature resolves it so), whole experts per GPU, where the flags say EP1 (each expert sliced in two).
The table and the record say which layout the shapes are of."""

from __future__ import annotations

import json

import pytest

from conftest import demo_project
from toolkit.cli import main
from toolkit.kernels import records

RECIPE = """extends = "../demo/torch-baseline.toml"
[server.args]
tp-size = 2
moe-a2a-backend = "deepep"
[expect]
tp_size = 2
"""


@pytest.mark.slow
def test_model_shapes_are_of_the_layout_sglang_resolves(tmp_path, monkeypatch, home, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "t").mkdir()
    (proj / "recipes" / "t" / "deepep.toml").write_text(RECIPE)
    assert main(["kernels", "t/deepep", "--op", "test.matmul", "--trials", "2", "--iters", "2", "--warmup", "1",
                 "--flush-mb", "1", "--json"]) == 0
    out = capsys.readouterr()
    (table,) = json.loads(out.out)["tables"]
    basis = "TP2 EP2 from sglang's static resolution"
    assert table["shapes_basis"] == basis and f"model shapes at {basis}" in out.err
    # minisglang-torch-step: 8 experts of intermediate 768, hidden 256; EP2 keeps each expert whole
    dims = {r["label"]: (r["dims"]["n"], r["dims"]["k"]) for r in table["rows"]}
    assert dims == {"experts.gate_up": (2 * 768, 256), "experts.down": (256, 768)}, dims
    (rec,) = records.latest(home, "t/deepep", "test.matmul", None)
    assert rec["shapes_basis"] == basis
    assert main(["kernels", "t/deepep", "--op", "test.matmul", "--list"]) == 0
    assert f"model shapes at {basis}" in capsys.readouterr().out
