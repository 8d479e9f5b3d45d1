"""Opportunistic Expert Activation (patches/sglang/oea-topk.patch) in the pinned sglang release.

Default run: the toolkit applies the shipped `oea` recipe to the real sglang 0.5.23 wheel and the
tests load the patched `sglang/srt/layers/moe/oea.py` from that applied tree (torch is installed in
the nox `tests` session). GLM-5's routing config: 256 experts, top-8, n_group 1, topk_group 1,
sigmoid, correction bias, routed_scaling_factor 2.5, 16 decode tokens.

Slow run (--slow): the same check through sglang's own `select_experts` inside the real `oea` env
(`patchbench build oea`), with the recipe's [server.env] and without.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, TEST_CACHE

E, K, K0, TOKENS = 256, 8, 4, 16
LINE = re.compile(r"^OEA active: tokens=(\d+) distinct_before=(\d+) distinct_after=(\d+)$")


def _torch():
    if importlib.util.find_spec("torch") is None:
        if os.environ.get("PATCHBENCH_REQUIRE_TORCH") == "1":
            pytest.fail("torch is not installed in this session (nox -s tests installs it)")
        pytest.skip("torch is not installed (nox -s tests installs it)")
    import torch

    return torch


@pytest.fixture(scope="module")
def torch():
    return _torch()


@pytest.fixture(scope="module")
def oea_tree() -> Path:
    """The sglang tree of the shipped `oea` recipe, as `patchbench apply oea` makes it."""
    from toolkit.recipe import load_recipe
    from toolkit.tree import apply_recipe

    home = TEST_CACHE / "oea-home"
    home.mkdir(parents=True, exist_ok=True)
    trees = apply_recipe(load_recipe("oea"), home, frozen=True, write_lock=False)
    tree = next(t for t, _ in trees if t.source == "sglang")
    assert tree.patches == ("sglang/oea-topk.patch",)
    return tree.project_dir


@pytest.fixture(scope="module")
def oea(torch, oea_tree):
    path = oea_tree / "sglang" / "srt" / "layers" / "moe" / "oea.py"
    spec = importlib.util.spec_from_file_location("sglang.srt.layers.moe.oea", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def env(oea, monkeypatch):
    for var in ("SGLANG_OEA_K0", "SGLANG_OEA_MAX_TOKENS", "SGLANG_OEA_LOG_INTERVAL"):
        monkeypatch.delenv(var, raising=False)
    oea.oea_config.cache_clear()
    oea._last_log_time = None
    yield monkeypatch
    oea.oea_config.cache_clear()


def _glm5_inputs(torch, tokens=TOKENS, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, E, generator=g), torch.randn(E, generator=g) * 0.1


def test_topk_routes_through_oea_on_the_grouped_path(oea_tree):
    """select_experts decides OEA before the grouped branch, so GLM-5's biased grouped router
    (and its fused kernels) are replaced for decode-sized calls."""
    text = (oea_tree / "sglang" / "srt" / "layers" / "moe" / "topk.py").read_text()
    body = text[text.index("def select_experts("):]
    assert body.index("elif oea_k0:") < body.index("elif use_grouped_topk:")
    gate = body[body.index("oea_k0 = 0"): body.index("elif oea_k0:")]
    assert "and not use_grouped_topk\n" not in gate  # the old patch only acted ungrouped


def test_glm5_grouped_routing_fewer_distinct_experts(torch, oea, env, caplog):
    logits, bias = _glm5_inputs(torch)
    env.setenv("SGLANG_OEA_K0", str(K0))
    assert oea.oea_k0_for_batch(K, TOKENS) == K0
    with caplog.at_level(logging.INFO, logger="sglang.srt.layers.moe.oea"):
        w, ids = oea.oea_select(logits, K, K0, renormalize=True, scoring_func="sigmoid",
                                correction_bias=bias, num_expert_group=1, topk_group=1)
    choice = logits.sigmoid() + bias
    plain = torch.topk(choice, K, dim=-1).indices
    before, after = plain.unique().numel(), ids.unique().numel()
    print(f"GLM-5 grouped sigmoid+bias: distinct {before} -> {after}")
    assert after <= 0.7 * before
    top_k0 = torch.topk(choice, K0, dim=-1).indices
    for t in range(TOKENS):
        assert set(ids[t, :K0].tolist()) == set(top_k0[t].tolist())
        assert len(set(ids[t].tolist())) == K
    ref = logits.sigmoid().gather(1, ids.long())
    torch.testing.assert_close(w, ref / ref.sum(-1, keepdim=True))
    lines = [LINE.match(r.getMessage()) for r in caplog.records]
    assert [m.groups() for m in lines if m] == [(str(TOKENS), str(before), str(after))]


def test_log_line_is_rate_limited(torch, oea, env, caplog):
    logits, bias = _glm5_inputs(torch)
    env.setenv("SGLANG_OEA_K0", str(K0))
    env.setenv("SGLANG_OEA_LOG_INTERVAL", "3600")
    with caplog.at_level(logging.INFO, logger="sglang.srt.layers.moe.oea"):
        for _ in range(5):
            oea.oea_select(logits, K, K0, renormalize=True, scoring_func="sigmoid", correction_bias=bias,
                           num_expert_group=1, topk_group=1)
    assert sum(bool(LINE.match(r.getMessage())) for r in caplog.records) == 1


def test_off_and_above_the_token_limit_is_plain_routing(oea, env):
    assert oea.oea_k0_for_batch(K, TOKENS) == 0  # SGLANG_OEA_K0 unset
    env.setenv("SGLANG_OEA_K0", str(K0))
    env.setenv("SGLANG_OEA_MAX_TOKENS", "64")
    oea.oea_config.cache_clear()
    assert oea.oea_k0_for_batch(K, 64) == K0
    assert oea.oea_k0_for_batch(K, 65) == 0
    assert oea.oea_k0_for_batch(K, 1) == 0


def test_grouped_routing_stays_inside_the_token_groups(torch, oea):
    logits, bias = _glm5_inputs(torch, seed=3)
    _, ids = oea.oea_select(logits, K, K0, renormalize=True, scoring_func="sigmoid", correction_bias=bias,
                            num_expert_group=8, topk_group=4)
    choice = oea.choice_scores(logits.sigmoid(), bias, 8, 4)
    assert torch.isfinite(choice.gather(1, ids.long())).all()


def test_ungrouped_softmax_path(torch, oea):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(TOKENS, E, generator=g) * 2.0
    w, ids = oea.oea_select(logits, K, K0, renormalize=True, scoring_func="softmax")
    plain = torch.topk(logits, K, dim=-1).indices
    before, after = plain.unique().numel(), ids.unique().numel()
    print(f"ungrouped softmax: distinct {before} -> {after}")
    assert after <= 0.7 * before
    assert torch.equal(ids[:, :K0].long(), torch.topk(logits, K0, dim=-1).indices)
    torch.testing.assert_close(w, torch.softmax(logits.gather(1, ids.long()), dim=-1))


def test_small_active_set_falls_back_to_own_next_best(torch, oea):
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 32, generator=g)
    _, ids = oea.oea_select(logits, 6, 2, renormalize=True)
    for t in range(2):
        assert len(set(ids[t].tolist())) == 6  # 2 own + 2 from the other token + 2 own next-best


# --- slow: sglang's own select_experts in the real `oea` env -----------------------------------


@pytest.mark.slow
def test_select_experts_in_the_oea_env():
    from toolkit.pipeline import prepare
    from toolkit.recipe import load_recipe

    home = Path(os.environ.get("PATCHBENCH_TEST_HOME", TEST_CACHE))
    recipe = load_recipe("oea")
    p = prepare(recipe, home, until="build")
    proc = subprocess.run([str(p.env.python), str(REPO_ROOT / "tests" / "oea_select_experts_check.py"),
                           json.dumps(dict(recipe.server.env))], capture_output=True, text=True,
                          env={**p.env.run_environ(), "CUDA_VISIBLE_DEVICES": ""}, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.splitlines()[-1])
    for path in ("grouped", "ungrouped"):
        r = res[path]
        off_ids, on_ids = r["off"][1], r["on"][1]
        before = len({e for row in off_ids for e in row})
        after = len({e for row in on_ids for e in row})
        print(f"{path}: distinct {before} -> {after}")
        assert after <= 0.7 * before, (path, before, after)
        assert r["big_on"] == r["big_off"]  # above the token limit: no change at all
        import torch

        logits, bias = torch.tensor(r["logits"]), torch.tensor(r["bias"])
        choice = (logits.sigmoid() + bias) if path == "grouped" else logits
        top_k0 = torch.topk(choice, K0, dim=-1).indices.tolist()
        for t in range(TOKENS):
            assert set(top_k0[t]) <= set(on_ids[t])
    assert any(LINE.match(line) for line in res["log_lines"])


def test_both_releases_ship_the_same_module():
    """The 0.5.10.post1 port adds the same oea.py as the 0.5.23 patch (no torch needed)."""
    from unidiff import PatchSet

    def added(patch):
        files = PatchSet(patch.read_text())
        (f,) = [f for f in files if f.path.endswith("layers/moe/oea.py")]
        return "".join(line.value for h in f for line in h if line.is_added)

    new = REPO_ROOT / "patches"
    assert added(new / "sglang" / "oea-topk.patch") == added(new / "sglang-0.5.10" / "oea-topk.patch")
