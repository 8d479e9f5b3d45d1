"""Every shipped recipe applies to the real PyPI artifacts, builds its env (the CPU part) and passes
the static config check with the pinned sglang's own parser. Slow: full sglang envs (uv, ~41 s first, then hardlinks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TEST_CACHE, REPO_ROOT
from toolkit.cli import main

pytestmark = pytest.mark.slow

SHARED_HOME = TEST_CACHE  # conftest: one shared cache for every test
GLM5_TP8 = ["baseline", "cutlass", "ep8", "sbo", "oea", "tiles", "moe-tiles", "arch-120f", "full-stack"]
SHIPPED = ["baseline", "cutlass", "ep8", "ep-vs-tp", "sm120-backends", "sbo", "oea", "tiles", "moe-tiles", "arch-120f", "full-stack", "sglang-0.5.10", "sglang-0.5.10-cutlass", "sglang-0.5.10-oea"]


def test_every_shipped_recipe_is_tested():
    names = sorted(p.stem for p in (REPO_ROOT / "recipes").glob("*.toml"))
    assert names == sorted(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_recipe_passes_static_check(name, capsys):
    SHARED_HOME.mkdir(parents=True, exist_ok=True)
    # --frozen: the committed lock (artifact sha256s, patch sha256s) still describes what is built
    rc = main(["run", name, "--until", "check", "--frozen", "--home", str(SHARED_HOME)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    said = " ".join((cap.out + cap.err).split())
    if name in GLM5_TP8:  # the MoE runner OEA needs, resolved by sglang for the SM120 target (--quantization)
        assert "moe_runner_backend flashinfer_cutlass" in said, said[-2000:]
    if name == "sm120-backends":  # GLM-5's attention kernels on SM120: DSA, flashinfer_sparse_mla (fp8 KV)
        assert "attention_backend dsa" in said and "dsa_decode_backend flashinfer_sparse_mla" in said, said[-2000:]
    # SBO without an all-to-all backend: accepted, echoed by /server_info, inert on decode graphs
    assert ("a decode difference from the baseline is not SBO's" in said) == (name in ("sbo", "full-stack"))
    assert main(["patches", "check", name, "--home", str(SHARED_HOME), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["patches"]
    assert all(r["status"] == "applies" for r in rows)


# The OEA check inside the `oea` env lives in tests/test_oea.py (test_select_experts_in_the_oea_env).
