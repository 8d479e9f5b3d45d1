"""Opportunistic Expert Activation (patches/sglang/oea-topk.patch) on CPU router logits.

The module under test is `sglang/srt/layers/moe/oea.py` as a patch puts it in a tree:
- with PATCHBENCH_OEA_TREE set, from that tree (a patched checkout, sdist, unpacked wheel or
  site-packages: `python/sglang/...` or `sglang/...` below it);
- otherwise from an empty git repository to which the patch's new-file hunk for oea.py is
  applied with `git apply --include` (the module is a new file, so it needs no base).
It imports only torch; the tests skip without torch (it is not in the dev venv).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
MODULE_REL = "sglang/srt/layers/moe/oea.py"
PATCHES = {
    "0.5.23": REPO_ROOT / "patches" / "sglang" / "oea-topk.patch",
    "0.5.10.post1": REPO_ROOT / "patches" / "sglang-0.5.10" / "oea-topk.patch",
}
ENV_VARS = ("SGLANG_OEA_K0", "SGLANG_OEA_MAX_TOKENS")


def _module_from_patch(patch: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "apply", f"--include=python/{MODULE_REL}", str(patch)], cwd=dest, check=True,
                   capture_output=True, text=True)
    return dest / "python" / MODULE_REL


def _module_in_tree(tree: Path) -> Path:
    for candidate in (tree / "python" / MODULE_REL, tree / MODULE_REL):
        if candidate.is_file():
            return candidate
    pytest.fail(f"PATCHBENCH_OEA_TREE={tree} has no {MODULE_REL} (is the patch applied?)")


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclass/NamedTuple machinery looks the module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="torch is not installed (the OEA module needs it)")


@pytest.fixture(scope="module")
def oea_path(tmp_path_factory) -> Path:
    tree = os.environ.get("PATCHBENCH_OEA_TREE")
    if tree:
        return _module_in_tree(Path(tree))
    return _module_from_patch(PATCHES["0.5.23"], tmp_path_factory.mktemp("oea-tree"))


@pytest.fixture(scope="module")
def oea(torch, oea_path):
    return _load(oea_path, "patchbench_test_oea")


@pytest.fixture
def clean_env(oea, monkeypatch):
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    oea.oea_config.cache_clear()
    yield monkeypatch
    oea.oea_config.cache_clear()


def _logits(torch, b, e, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, e, generator=g) * 2.0


def _reference_weights(torch, logits, ids, *, scoring="softmax", renormalize=True):
    """What the plain path computes for chosen experts `ids` (written out, not the module's helper)."""
    probs = torch.softmax(logits.float(), dim=-1) if scoring == "softmax" else logits.float().sigmoid()
    w = probs.gather(1, ids.long())
    return w / w.sum(dim=-1, keepdim=True) if renormalize else w


# --- no torch needed ---------------------------------------------------------------------------


def test_both_patches_ship_the_same_module(tmp_path):
    texts = {v: _module_from_patch(p, tmp_path / v).read_text() for v, p in PATCHES.items()}
    assert len(set(texts.values())) == 1, "oea.py differs between the 0.5.23 and 0.5.10 patches"
    text = texts["0.5.23"]
    imports = {line.split()[1] for line in text.splitlines()
               if line.startswith(("import ", "from ")) and not line.startswith("from __future__")}
    assert imports <= {"functools", "logging", "os", "typing", "torch"}, imports


# --- the routing rule --------------------------------------------------------------------------


@pytest.mark.parametrize("b,e,k,k0", [(16, 128, 8, 4), (16, 128, 8, 2), (32, 64, 6, 3), (8, 256, 8, 1)])
def test_every_token_keeps_its_top_k0(torch, oea, b, e, k, k0):
    logits = _logits(torch, b, e, seed=b + e + k + k0)
    w, ids = oea.oea_select(logits, k, k0, renormalize=True)
    assert ids.shape == (b, k) and ids.dtype == torch.int32 and w.dtype == torch.float32
    own_top = torch.topk(logits, k0, dim=-1).indices
    assert torch.equal(ids[:, :k0].long(), own_top)
    for row in ids.tolist():
        assert len(set(row)) == k, "a token was given the same expert twice"


@pytest.mark.parametrize("b,e,k,k0", [(16, 128, 8, 4), (16, 128, 8, 2), (4, 128, 8, 4), (64, 128, 8, 4)])
def test_distinct_experts_drop(torch, oea, b, e, k, k0):
    logits = _logits(torch, b, e, seed=7 * b + k0)
    _, plain_ids = torch.topk(logits, k, dim=-1)
    _, ids = oea.oea_select(logits, k, k0, renormalize=True)
    plain_distinct = plain_ids.unique().numel()
    oea_distinct = ids.unique().numel()
    assert oea_distinct < plain_distinct
    # Expected with random logits: the union of the baseline experts, plus fallbacks only when a
    # token finds fewer than k - k0 other active experts.
    baseline = torch.topk(logits, k0, dim=-1).indices.unique()
    assert oea_distinct >= baseline.numel()


def test_fill_prefers_the_active_set_then_own_next_best(torch, oea):
    e, k, k0 = 32, 6, 2
    logits = _logits(torch, 2, e, seed=3)  # two tokens: each sees at most 2 other active experts
    _, ids = oea.oea_select(logits, k, k0, renormalize=True)
    base = torch.topk(logits, k0, dim=-1).indices
    active = set(base.flatten().tolist())
    for t in range(2):
        row = ids[t].tolist()
        others = [x for x in active if x not in row[:k0]]
        by_score = sorted(others, key=lambda x: -logits[t, x].item())
        assert row[k0:k0 + len(by_score)] == by_score
        rest = [x for x in torch.argsort(logits[t], descending=True).tolist()
                if x not in active][: k - k0 - len(by_score)]
        assert row[k0 + len(by_score):] == rest


def _reference_oea_ids(logits, k, k0, valid):
    """OEA written out per token with Python lists (no tensor tricks)."""
    rows = logits.tolist()
    ranked = [sorted(range(len(r)), key=lambda x: -r[x]) for r in rows]
    active = {x for t in range(valid) for x in ranked[t][:k0]}
    out = []
    for t, order in enumerate(ranked):
        own = order[:k0]
        piggy = [x for x in order if x in active and x not in own][: k - k0]
        rest = [x for x in order if x not in active and x not in own][: k - k0 - len(piggy)]
        out.append(own + piggy + rest)
    return out


@pytest.mark.parametrize("b,valid", [(8, 8), (8, 5), (16, 3), (16, 1), (2, 2)])
def test_matches_a_per_token_reference(torch, oea, b, valid):
    e, k, k0 = 48, 8, 2
    logits = _logits(torch, b, e, seed=100 + b + valid)
    num_valid = None if valid == b else torch.tensor(valid)
    _, ids = oea.oea_select(logits, k, k0, renormalize=True, num_valid=num_valid)
    assert ids.tolist() == _reference_oea_ids(logits, k, k0, valid)
    if num_valid is not None:
        _, ids_int = oea.oea_select(logits, k, k0, renormalize=True, num_valid=valid)
        assert torch.equal(ids, ids_int)


# --- weights -----------------------------------------------------------------------------------


@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
@pytest.mark.parametrize("renormalize", [True, False])
def test_weights_as_the_plain_path_computes_them(torch, oea, scoring, renormalize):
    logits = _logits(torch, 16, 128, seed=5)
    w, ids = oea.oea_select(logits, 8, 3, renormalize=renormalize, scoring_func=scoring)
    torch.testing.assert_close(w, _reference_weights(torch, logits, ids, scoring=scoring,
                                                      renormalize=renormalize))
    if renormalize:
        torch.testing.assert_close(w.sum(-1), torch.ones(16))
    if scoring == "softmax" and renormalize:
        # renormalised softmax probabilities == softmax over the chosen experts' logits
        torch.testing.assert_close(w, torch.softmax(logits.gather(1, ids.long()), dim=-1))


def test_correction_bias_steers_choice_not_weights(torch, oea):
    logits = _logits(torch, 16, 64, seed=9)
    bias = torch.zeros(64)
    bias[:4] = 100.0  # experts 0..3 win every token's baseline
    w, ids = oea.oea_select(logits, 6, 2, renormalize=True, scoring_func="sigmoid", correction_bias=bias)
    assert set(ids[:, :2].flatten().tolist()) <= {0, 1, 2, 3}
    torch.testing.assert_close(w, _reference_weights(torch, logits, ids, scoring="sigmoid"))


def test_half_precision_logits(torch, oea):
    logits = _logits(torch, 16, 128, seed=13).to(torch.bfloat16)
    w, ids = oea.oea_select(logits, 8, 4, renormalize=True)
    assert w.dtype == torch.float32
    torch.testing.assert_close(w, _reference_weights(torch, logits, ids))


# --- disabled reproduces plain top-k -----------------------------------------------------------


@pytest.mark.parametrize("k0", [0, 8, 9])
@pytest.mark.parametrize("renormalize", [True, False])
def test_disabled_is_plain_topk_exactly(torch, oea, k0, renormalize):
    logits = _logits(torch, 16, 128, seed=21)
    w, ids = oea.oea_select(logits, 8, k0, renormalize=renormalize)
    probs = torch.softmax(logits, dim=-1)
    ref_w, ref_ids = torch.topk(probs, 8, dim=-1)
    if renormalize:
        ref_w = ref_w / ref_w.sum(dim=-1, keepdim=True)
    assert torch.equal(ids.long(), ref_ids)
    assert torch.equal(w, ref_w)


def test_single_token_is_plain_topk(torch, oea):
    logits = _logits(torch, 1, 128, seed=4)
    _, ids = oea.oea_select(logits, 8, 4, renormalize=True)
    assert torch.equal(ids.long(), torch.topk(logits, 8, dim=-1).indices)


# --- configuration (environment) ---------------------------------------------------------------


def test_off_unless_the_env_sets_k0(oea, clean_env):
    assert oea.oea_config() == (0, oea.DEFAULT_MAX_TOKENS)
    assert oea.oea_k0_for_batch(8, 16) == 0
    clean_env.setenv("SGLANG_OEA_K0", "0")
    oea.oea_config.cache_clear()
    assert oea.oea_k0_for_batch(8, 16) == 0


def test_env_k0_applies_to_small_batches_only(oea, clean_env):
    clean_env.setenv("SGLANG_OEA_K0", "4")
    clean_env.setenv("SGLANG_OEA_MAX_TOKENS", "32")
    oea.oea_config.cache_clear()
    assert oea.oea_k0_for_batch(8, 16) == 4
    assert oea.oea_k0_for_batch(8, 32) == 4
    assert oea.oea_k0_for_batch(8, 33) == 0  # prefill-sized: plain routing
    assert oea.oea_k0_for_batch(8, 1) == 0  # one token: OEA is a no-op
    assert oea.oea_k0_for_batch(4, 16) == 0  # k0 >= top_k: plain routing
    assert oea.oea_k0_for_batch(2, 16) == 0


def test_env_is_read_once(oea, clean_env):
    clean_env.setenv("SGLANG_OEA_K0", "4")
    oea.oea_config.cache_clear()
    assert oea.oea_k0_for_batch(8, 16) == 4
    clean_env.setenv("SGLANG_OEA_K0", "2")
    assert oea.oea_k0_for_batch(8, 16) == 4


@pytest.mark.parametrize("var,value", [("SGLANG_OEA_K0", "four"), ("SGLANG_OEA_K0", "-1"),
                                       ("SGLANG_OEA_MAX_TOKENS", "0")])
def test_bad_env_values_fail_loudly(oea, clean_env, var, value):
    clean_env.setenv(var, value)
    oea.oea_config.cache_clear()
    with pytest.raises(ValueError, match=var):
        oea.oea_k0_for_batch(8, 16)


def test_unsupported_scoring_function(torch, oea):
    with pytest.raises(ValueError, match="scoring"):
        oea.oea_select(_logits(torch, 4, 16), 4, 2, renormalize=True, scoring_func="sqrtsoftplus")
