"""Opportunistic Expert Activation (patches/sglang/oea-topk.patch) in the pinned sglang release.

Default run: the toolkit applies the shipped `oea` recipe to the real sglang 0.5.23 wheel. sglang's
own `select_experts` (the patched `sglang/srt/layers/moe/topk.py` of that tree, importing its `oea.py`)
routes GLM-5's config (256 experts, top-8, n_group 1, topk_group 1, sigmoid, correction bias,
routed_scaling_factor 2.5) and the ungrouped softmax path for 16 decode tokens and for 128, with the
recipe's [server.env] and without; the release's unpatched topk.py routes the same inputs beside it.
That runs in a subprocess of a cached CPU venv (tests/sglang_cpu.py: CPU torch 2.13.0 and the real
packages the import chain reaches; the tree itself is on PYTHONPATH, not installed). Its only
placeholder is the schema of torchvision's two CUDA-linked operators (tests/torchvision_ops_placeholder.py),
which torchvision's import registers and nothing on the routing path calls. TORCHDYNAMO_DISABLE=1
runs upstream's torch.compile'd reference router (biased_grouped_topk_impl) eagerly: the same Python,
no C++ toolchain, no cold compile. The module's own helpers (rate-limited log, groups, fallback)
are tested directly on the tree's oea.py.

Slow run (--slow): the same check inside the real `oea` env (`patchbench build oea`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, TEST_CACHE, git, once_per_run
from sglang_cpu import sglang_cpu_python

E, K, K0, TOKENS = 256, 8, 4, 16
LINE = re.compile(r"^OEA active: tokens=(\d+) distinct_before=(\d+) distinct_after=(\d+) \(means of the first MoE "
                  r"layer over (\d+) decode step\(s\), counted on the device: CUDA-graph replays included\)$")
CHECK = REPO_ROOT / "tests" / "oea_select_experts_check.py"
TOPK_PY = Path("sglang", "srt", "layers", "moe", "topk.py")
PATHS = ("grouped", "ungrouped")


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
def sglang_tree():
    """The sglang tree of the shipped `oea` recipe, as `patchbench apply oea` makes it."""
    from toolkit.recipe.load import load_recipe
    from toolkit.tree.applied import apply_recipe

    home = TEST_CACHE / "oea-home"
    home.mkdir(parents=True, exist_ok=True)
    trees = apply_recipe(load_recipe("oea"), home, frozen=True, write_lock=False)
    tree = next(t for t, _ in trees if t.source == "sglang")
    assert tree.patches == ("sglang/oea-topk.patch",)
    return tree


@pytest.fixture(scope="module")
def oea_tree(sglang_tree) -> Path:
    return sglang_tree.project_dir


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


def _recipe_env() -> dict:
    from toolkit.recipe.load import load_recipe

    env = dict(load_recipe("oea").server.env)
    assert (env["SGLANG_OEA_K0"], env["SGLANG_OEA_MAX_TOKENS"]) == (str(K0), "64")
    return env


@pytest.fixture(scope="module")
def routed(torch, sglang_tree, tmp_path_factory) -> dict:
    """The check's result: sglang's real select_experts, patched and unpatched, on CPU. Run once per
    test run (the tests that read it may sit on several xdist workers), keyed on the tree and check."""
    key = hashlib.sha256((git(sglang_tree.path, "rev-parse", "HEAD") + CHECK.read_text()).encode()).hexdigest()
    return once_per_run(tmp_path_factory, f"oea-routed-{key[:16]}",
                        lambda: _run_check(sglang_tree, tmp_path_factory))


def _run_check(tree, tmp_path_factory) -> dict:
    py = sglang_cpu_python(tree.project_dir)
    upstream = tmp_path_factory.mktemp("upstream") / "topk.py"
    rel = (tree.project_dir / TOPK_PY).relative_to(tree.path).as_posix()
    upstream.write_text(git(tree.path, "show", f"{tree.base_commit}:{rel}") + "\n")
    dropped = ("PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_") and k not in dropped}
    env.update(PYTHONPATH=str(tree.project_dir), CUDA_VISIBLE_DEVICES="", TORCHDYNAMO_DISABLE="1",
               PYTHONPYCACHEPREFIX=str(TEST_CACHE / "pycache"))  # bytecode cached, the tree left clean
    proc = subprocess.run([str(py), str(CHECK), json.dumps(_recipe_env()), str(upstream)],
                          capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def _distinct(ids) -> int:
    return len({e for row in ids for e in row})


def _assert_oea_routing(torch, res: dict, path: str) -> tuple[int, int]:
    """OEA on at 16 tokens: >= 30% fewer distinct experts, every token keeps its own top-k0 and
    gets k distinct experts, weights are the plain path's formula for the chosen experts, and the
    activation line reports the counts. Returns (distinct before, after)."""
    r = res[path]
    (_, off_ids), (on_w, on_ids) = r["off"], r["on"]
    before, after = _distinct(off_ids), _distinct(on_ids)
    print(f"{path}: distinct experts {before} -> {after} for {TOKENS} tokens")
    assert after <= 0.7 * before, (path, before, after)
    logits = torch.tensor(r["logits"])
    choice = logits.sigmoid() + torch.tensor(r["bias"]) if path == "grouped" else logits
    top_k0 = torch.topk(choice, K0, dim=-1).indices.tolist()
    for t in range(TOKENS):
        assert set(on_ids[t][:K0]) == set(top_k0[t]) <= set(off_ids[t])
        assert len(set(on_ids[t])) == K
    ids = torch.tensor(on_ids).long()
    scores = logits.sigmoid() if path == "grouped" else logits.softmax(-1)
    chosen = scores.gather(1, ids)
    expected = chosen / chosen.sum(-1, keepdim=True) * (2.5 if path == "grouped" else 1.0)
    torch.testing.assert_close(torch.tensor(on_w), expected)
    lines = [LINE.match(line) for line in res["log_lines"]]
    assert any(m and m.groups()[:3] == (str(TOKENS), str(before), str(after)) for m in lines), res["log_lines"]
    return before, after


def _assert_decode_steps_only(res: dict, path: str) -> None:
    """Inside a forward, the mode decides: a prefill batch keeps the plain routing whatever its
    size, a decode batch is re-routed (the prompts' prefills at concurrency 1 are never touched)."""
    r = res[path]
    assert r["on_prefill"] == r["off"] and r["on_decode"] == r["on"]


def _assert_unchanged_off_and_above_limit(res: dict, path: str) -> None:
    r = res[path]
    assert r["big_on"] == r["big_off"]  # 128 tokens > SGLANG_OEA_MAX_TOKENS: no change at all
    if "upstream" in r:
        assert r["off"] == r["upstream"]  # OEA off: the release's own routing, bit for bit
        assert r["big_off"] == r["big_upstream"]


def test_select_experts_runs_the_patched_tree(routed, sglang_tree):
    moe = sglang_tree.project_dir / TOPK_PY.parent
    assert Path(routed["topk_py"]) == moe / "topk.py" and Path(routed["oea_py"]) == moe / "oea.py"
    assert routed["torch"].startswith("2.13.0")
    assert routed["placeholders"] == ["torchvision::nms", "torchvision::qnms"]  # and nothing else


@pytest.mark.parametrize("path", PATHS)
def test_select_experts_fewer_distinct_experts(torch, routed, path):
    _assert_oea_routing(torch, routed, path)


@pytest.mark.parametrize("path", PATHS)
def test_select_experts_unchanged_when_off_or_above_the_limit(routed, path):
    _assert_unchanged_off_and_above_limit(routed, path)


@pytest.mark.parametrize("path", PATHS)
def test_select_experts_reroutes_decode_steps_only(routed, path):
    _assert_decode_steps_only(routed, path)


# --- oea.py's own helpers, on the tree's module ------------------------------------------------


def _glm5_inputs(torch, tokens=TOKENS, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, E, generator=g), torch.randn(E, generator=g) * 0.1


class _Mode:
    def __init__(self, decode: bool, idle: bool = False):
        self.decode, self.idle = decode, idle

    def is_decode(self) -> bool:
        return self.decode

    def is_idle(self) -> bool:
        return self.idle


class _Algo:
    def __init__(self, name: str):
        self.name = name

    def is_none(self) -> bool:
        return self.name == "NONE"


def _batch(torch, decode: bool = True, rows: int = TOKENS, *, idle: bool = False, spec: str = "NONE",
           extend_in_batch: bool = False, dp_rows: list[int] | None = None):
    """What oea.note_forward reads of sglang 0.5.23's ForwardBatch (`dp_rows`: every attention-DP
    rank's real rows, its global_num_tokens_gpu)."""
    from types import SimpleNamespace

    counts = torch.tensor(dp_rows, dtype=torch.int64) if dp_rows is not None else None
    return SimpleNamespace(forward_mode=_Mode(decode, idle), batch_size=rows, input_ids=torch.zeros(rows, dtype=torch.int64),
                           spec_algorithm=_Algo(spec), is_extend_in_batch=extend_in_batch,
                           global_num_tokens_gpu=counts)


def test_log_line_is_rate_limited_and_counts_the_first_layer_of_each_decode_step(torch, oea, env, caplog):
    """Five decode forwards of three MoE layers each: one line (the interval), the means of the
    first layer's calls over the five steps; a prefill forward adds nothing."""
    logits, bias = _glm5_inputs(torch)
    env.setenv("SGLANG_OEA_K0", str(K0))
    env.setenv("SGLANG_OEA_LOG_INTERVAL", "3600")
    oea._totals.clear()
    oea._logged.clear()
    with caplog.at_level(logging.INFO, logger="sglang.srt.layers.moe.oea"):
        for decode in (True, True, False, True, True, True):
            state = oea.note_forward(_batch(torch, decode))
            for _layer in range(3):
                if oea.oea_k0_for_batch(K, TOKENS):
                    oea.oea_select(logits, K, K0, renormalize=True, scoring_func="sigmoid", correction_bias=bias,
                                   num_expert_group=1, topk_group=1)
            oea.restore_forward(state)
            oea.flush()
        lines = [LINE.match(r.getMessage()) for r in caplog.records]
        last = oea.flush(force=True)  # what the interval held back: the 4 later decode steps
    found = [m for m in lines if m]
    assert len(found) == 1 and found[0].group(1) == str(TOKENS) and found[0].group(4) == "1"  # the first flush
    assert LINE.match(last) and LINE.match(last).group(4) == "4", last


def test_off_and_above_the_token_limit_is_plain_routing(oea, env):
    assert oea.oea_k0_for_batch(K, TOKENS) == 0  # SGLANG_OEA_K0 unset
    env.setenv("SGLANG_OEA_K0", str(K0))
    env.setenv("SGLANG_OEA_MAX_TOKENS", "64")
    oea.oea_config.cache_clear()
    assert oea.oea_k0_for_batch(K, 64) == K0
    assert oea.oea_k0_for_batch(K, 65) == 0
    assert oea.oea_k0_for_batch(K, 1) == 0
    state = oea.note_forward(_batch(_torch(), False))  # a prefill forward: plain routing at any size
    assert oea.oea_k0_for_batch(K, 16) == 0
    oea.restore_forward(state)


def test_speculative_servers_and_dp_attention_route_alike_on_every_rank(torch, oea, env, monkeypatch):
    """A speculative server keeps the plain routing, its draft model's decode steps included (sglang
    0.5.23 captures the EAGLE draft graph as DECODE). Under attention DP every rank routes the same
    gathered tokens: a decode rank and an idle rank re-route alike, and no rank does while any extends."""
    env.setenv("SGLANG_OEA_K0", str(K0))
    oea.oea_config.cache_clear()

    def k0(batch):
        state = oea.note_forward(batch)
        try:
            return oea.oea_k0_for_batch(K, TOKENS)
        finally:
            oea.restore_forward(state)

    assert k0(_batch(torch)) == K0
    assert k0(_batch(torch, spec="EAGLE")) == 0  # the draft's DECODE forward of a speculative server
    assert k0(_batch(torch, False, idle=True)) == 0  # one GPU group: an idle batch is not re-routed
    monkeypatch.setattr(oea, "_attn_dp_size", lambda: 8)
    assert k0(_batch(torch)) == K0 and k0(_batch(torch, False, idle=True)) == K0
    assert k0(_batch(torch, extend_in_batch=True)) == 0  # another rank prefills: nobody re-routes
    assert k0(_batch(torch, False, idle=True, extend_in_batch=True)) == 0


def test_padding_rows_of_a_replayed_graph_stay_out_of_the_active_set(torch, oea, env, caplog):
    """Plain TP: sglang 0.5.23 passes no num_token_non_padded, and a CUDA graph captured for 16 rows
    replays a batch of 10 with 6 stale rows. The forward's real row count (written by note_forward into
    a device scalar) bounds the active set as an explicit bound would, and only real rows are counted;
    a step with no real rows (an idle rank replaying the decode graph) is not a step."""
    env.setenv("SGLANG_OEA_K0", str(K0))
    env.setenv("SGLANG_OEA_LOG_INTERVAL", "3600")
    oea.oea_config.cache_clear()
    logits, bias = _glm5_inputs(torch)
    kw = dict(renormalize=True, scoring_func="sigmoid", correction_bias=bias, num_expert_group=1, topk_group=1)
    oea._totals.clear()
    oea._logged.clear()
    with caplog.at_level(logging.INFO, logger="sglang.srt.layers.moe.oea"):
        state = oea.note_forward(_batch(torch, rows=10))
        try:
            _, ids = oea.oea_select(logits, K, K0, **kw)
        finally:
            oea.restore_forward(state)
        line = LINE.match(oea.flush(force=True) or "")
        state = oea.note_forward(_batch(torch, rows=0))
        try:
            oea.oea_select(logits, K, K0, **kw)  # the graph's 16 rows, none of them real
        finally:
            oea.restore_forward(state)
        idle = oea.flush(force=True)
    assert line and line.group(1) == "10" and line.group(4) == "1", line
    assert idle is None  # nothing to say: no step had rows
    _, bounded = oea.oea_select(logits, K, K0, num_valid=10, **kw)
    _, unbounded = oea.oea_select(logits, K, K0, **kw)
    assert torch.equal(ids, bounded) and not torch.equal(ids, unbounded)


@pytest.mark.parametrize("slots", [(8, 8), (6, 10)], ids=["graph-slots", "eager-sum-len"])
def test_padding_rows_of_a_dp_gather_stay_out_of_the_active_set(torch, oea, env, caplog, monkeypatch, slots):
    """Attention DP, the MoE input gathered one slot per rank (sglang 0.5.23 gives no row bound there):
    rank 0 has 5 real rows, rank 1 has 3, the rest of each slot is padding (a decode graph's equal slots,
    or an eager gather's padded counts). The real rows are routed exactly as the same tokens without
    any padding, and the step counts 8 tokens; a layout that does not add up counts every row."""
    env.setenv("SGLANG_OEA_K0", str(K0))
    env.setenv("SGLANG_OEA_LOG_INTERVAL", "3600")
    oea.oea_config.cache_clear()
    logits, bias = _glm5_inputs(torch)
    kw = dict(renormalize=True, scoring_func="sigmoid", correction_bias=bias, num_expert_group=1, topk_group=1)
    real = [*range(5), *range(slots[0], slots[0] + 3)]
    monkeypatch.setattr(oea, "_attn_dp_size", lambda: 2)
    monkeypatch.setattr(oea, "_gathered_slot_sizes", lambda: list(slots))
    oea._totals.clear()
    oea._logged.clear()
    with caplog.at_level(logging.INFO, logger="sglang.srt.layers.moe.oea"):
        state = oea.note_forward(_batch(torch, rows=5, dp_rows=[5, 3]))
        try:
            _, ids = oea.oea_select(logits, K, K0, **kw)
        finally:
            oea.restore_forward(state)
        line = LINE.match(oea.flush(force=True) or "")
    assert line and line.group(1) == "8", line
    _, alone = oea.oea_select(logits[real], K, K0, **kw)  # the same tokens, no padding, no DP
    assert torch.equal(ids[real], alone)
    _, unbounded = oea.oea_select(logits, K, K0, **kw)
    assert not torch.equal(ids[real], unbounded[real])  # the padding rows did change the active set
    monkeypatch.setattr(oea, "_gathered_slot_sizes", lambda: [4, 4])  # 8 slot rows, 16 MoE rows
    state = oea.note_forward(_batch(torch, rows=5, dp_rows=[5, 3]))
    try:
        _, all_rows = oea.oea_select(logits, K, K0, **kw)
    finally:
        oea.restore_forward(state)
    assert torch.equal(all_rows, unbounded)


def test_grouped_routing_stays_inside_the_token_groups(torch, oea):
    logits, bias = _glm5_inputs(torch, seed=3)
    _, ids = oea.oea_select(logits, K, K0, renormalize=True, scoring_func="sigmoid", correction_bias=bias,
                            num_expert_group=8, topk_group=4)
    choice = oea.choice_scores(logits.sigmoid(), bias, 8, 4)
    assert torch.isfinite(choice.gather(1, ids.long())).all()


def test_small_active_set_falls_back_to_own_next_best(torch, oea):
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 32, generator=g)
    _, ids = oea.oea_select(logits, 6, 2, renormalize=True)
    for t in range(2):
        assert len(set(ids[t].tolist())) == 6  # 2 own + 2 from the other token + 2 own next-best


# --- slow: sglang's own select_experts in the real `oea` env -----------------------------------


@pytest.mark.slow
def test_select_experts_in_the_oea_env(torch):
    from toolkit.run.pipeline import prepare
    from toolkit.recipe.load import load_recipe

    home = TEST_CACHE
    p = prepare(load_recipe("oea"), home, until="build")
    proc = subprocess.run([str(p.env.python), str(CHECK), json.dumps(_recipe_env())], capture_output=True,
                          text=True, env={**p.env.run_environ(), "CUDA_VISIBLE_DEVICES": ""}, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.splitlines()[-1])
    for path in PATHS:
        _assert_oea_routing(torch, res, path)
        _assert_unchanged_off_and_above_limit(res, path)


def test_both_releases_route_alike():
    """The 0.5.10.post1 port adds the same routing functions as the 0.5.23 patch (no torch needed).
    Only 0.5.23's has sglang's forward_context to learn the forward mode and to flush device-side
    counts; the 0.5.10 port keeps the token-count proxy and its eager-call log line."""
    import ast

    from unidiff import PatchSet

    def functions(patch):
        files = PatchSet(patch.read_text())
        (f,) = [f for f in files if f.path.endswith("layers/moe/oea.py")]
        tree = ast.parse("".join(line.value for h in f for line in h if line.is_added))
        return {n.name: ast.dump(n) for n in tree.body if isinstance(n, ast.FunctionDef)}

    new = REPO_ROOT / "patches"
    a, b = functions(new / "sglang" / "oea-topk.patch"), functions(new / "sglang-0.5.10" / "oea-topk.patch")
    for name in ("parse_oea_config", "routing_scores", "choice_scores", "_weights_for", "_valid_rows"):
        assert a[name] == b[name], name
