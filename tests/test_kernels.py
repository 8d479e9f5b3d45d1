"""Kernel tables (`patchbench kernels`, toolkit/kernels): model shapes from the roofline's own facts,
shape files and FlashInfer trace dumps, the in-env probe (trials, cold-L2 flush, reference check)
with the torch CPU test op, and the CLI flow (store, compare --kernels-table, export, report) on the
demo torch recipe's env."""

from __future__ import annotations

import math
import json
import subprocess

import pytest

from conftest import base_torch_python, demo_project
from toolkit.cli import main
from toolkit.errors import BadInput
from toolkit.kernels import records
from toolkit.kernels.export import export
from toolkit.kernels.measure import Settings, check_op, measure
from toolkit.kernels.registry import OPS, get_op
from toolkit.kernels.shapes import Shape, file_shapes, layout_of, model_shapes
from toolkit.kernels.table import FIXED, WRONG, compare, rows
from toolkit.report.kernels import kernel_section
from toolkit.recipe.load import load_recipe
from toolkit.resources import PROBES_DIR
from toolkit.roofline import expected_distinct_experts, make_inputs

MM = get_op("flashinfer.mm_fp4")
MOE = get_op("flashinfer.cutlass_fused_moe")
TEST = get_op("test.matmul")

# `measured` (two torch probes in a torch venv) built by one worker, not by each one that
# --dist loadgroup hands one of the tests asking for it
pytestmark = pytest.mark.xdist_group("kernels-measured")


# ---------------------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("name,tp,ep", [("baseline", 8, 1), ("ep8", 8, 8)])
def test_glm5_shapes_agree_with_the_roofline(name, tp, ep, monkeypatch):
    monkeypatch.delenv("PATCHBENCH_GPUS", raising=False)
    recipe = load_recipe(name)
    lay = layout_of(recipe)
    assert (lay.tp, lay.ep) == (tp, ep)
    model = make_inputs("glm-5", "rtx-pro-6000", tp=tp, ep=ep).model  # the roofline's own model facts
    gemms = model_shapes(lay, MM)
    by_label = {}
    for s in gemms:
        by_label.setdefault(s.label, set()).add((s.dims["n"], s.dims["k"]))
    (gu_n, gu_k), = by_label["experts.gate_up"]
    (dn_n, dn_k), = by_label["experts.down"]
    # one GPU's slice of one expert: the two GEMMs hold exactly the roofline's expert weights / (TP/EP)
    assert gu_n * gu_k + dn_n * dn_k == model.expert_params // (tp // ep)
    assert gu_k == dn_n == model.hidden == 6144
    assert gu_n == 2 * dn_k
    if ep == 1:  # TP8: each expert sliced 8 ways, 2 x 256 + 256 = 768 columns of 6144
        assert (gu_n, dn_k, gu_n + dn_k) == (512, 256, 768)
    else:  # EP8: whole experts, 32 per GPU
        assert (gu_n, dn_k) == (4096, 2048)
    # M: the mean tokens per active expert at each benchmark concurrency, from the roofline's count
    for s in gemms:
        for b in s.points:
            want = b * model.top_k / expected_distinct_experts(model.n_experts, model.top_k, b)
            assert s.dims["m"] == max(1, round(want))
    assert {b for s in gemms for b in s.points} == set(recipe.benchmark.concurrency)
    assert min(s.dims["m"] for s in gemms) == 1
    moe = model_shapes(lay, MOE)
    assert {s.dims["experts"] for s in moe} == {model.n_experts // ep}
    assert {s.dims["inter"] for s in moe} == {dn_k}
    assert {s.dims["top_k"] for s in moe} == {max(1, model.top_k // ep)}
    assert [s.dims["tokens"] for s in moe] == sorted(recipe.benchmark.concurrency)


def test_moe_dp_slices_each_expert_over_tp_ep_moe_dp(monkeypatch):
    """sglang 0.5.23: moe_tp_size = tp // ep // moe_dp (runtime_context.derive_parallel_widths): at TP8
    attn-CP2 MoE-DP2 one GPU holds a quarter of every expert (1,536 columns), not an eighth."""
    monkeypatch.delenv("PATCHBENCH_GPUS", raising=False)
    resolved = {"tp_size": 8, "ep_size": 1, "attn_cp_size": 2, "moe_dp_size": 2, "pp_size": 1, "dp_size": 1}
    lay = layout_of(load_recipe("baseline"), resolved)
    assert lay.slice == 4 and lay.basis == "TP8 EP1 MoE-DP2 from sglang's static resolution"
    dims = {s.label: s.dims for s in model_shapes(lay, MM)}
    assert (dims["experts.gate_up"]["n"], dims["experts.down"]["k"]) == (1024, 512)


def test_moe_dp_groups_each_run_the_whole_decode_batch_as_the_roofline_does(monkeypatch):
    """sglang 0.5.23 splits a batch's tokens over the attention-CP ranks only in a context-parallel extend
    (layers/layer_boundary/layout.py:206-214), so at decode each MoE-DP group (moe_dp == attn_cp) runs all b
    tokens: the kernel shapes take M from b, as the roofline's experts row does (they took ceil(b / 2))."""
    monkeypatch.delenv("PATCHBENCH_GPUS", raising=False)
    resolved = {"tp_size": 8, "ep_size": 1, "attn_cp_size": 2, "moe_dp_size": 2, "pp_size": 1, "dp_size": 1}
    recipe = load_recipe("baseline")
    lay = layout_of(recipe, resolved)
    roof = make_inputs("glm-5", "rtx-pro-6000", tp=8, attn_cp=2, moe_dp=2)
    model = roof.model
    for s in model_shapes(lay, MM):
        for b in s.points:
            t = roof.moe_tokens(b)
            assert s.dims["m"] == max(1, round(t * model.top_k / expected_distinct_experts(model.n_experts,
                                                                                           model.top_k, t)))
    by_b = {b: s.dims["m"] for s in model_shapes(lay, MM) if s.label == "experts.down" for b in s.points}
    whole = layout_of(recipe, {**resolved, "moe_dp_size": 1, "attn_cp_size": 1})
    assert by_b[1024] == whole.tokens_per_expert(1024) == 32
    moe = {b: s.dims["tokens"] for s in model_shapes(lay, MOE) for b in s.points}
    assert moe[1024] == 1024 and moe[1] == 1 and moe[2] == 2


def test_shapes_from_jsonl_and_a_flashinfer_trace_dump(tmp_path):
    jsonl = tmp_path / "shapes.jsonl"
    jsonl.write_text('{"m": 1, "n": 768, "k": 6144}\n\n{"m": 16, "n": 768, "k": 6144, "label": "x"}\n')
    assert [s.dims for s in file_shapes(jsonl, MM)] == [{"m": 1, "n": 768, "k": 6144}, {"m": 16, "n": 768, "k": 6144}]
    dump = tmp_path / "fi_trace_out"
    dump.mkdir()
    # what FLASHINFER_TRACE_DUMP=1 writes for mm_fp4: M is a var axis, N and K const
    (dump / "gemm_fp4_n512_k6144.json").write_text(json.dumps({
        "name": "gemm_fp4_n512_k6144", "op_type": "gemm_fp4",
        "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 512}, "K": {"type": "const", "value": 6144},
                 "block_size": {"type": "const", "value": 16}},
        "inputs": {}, "outputs": {}}))
    (dump / "rmsnorm_h6144.json").write_text(json.dumps({"name": "rmsnorm_h6144", "op_type": "rmsnorm",
                                                         "axes": {"hidden_size": {"type": "const", "value": 6144}}}))
    shapes = file_shapes(dump, MM, (1, 16, 128))
    assert [s.dims for s in shapes] == [{"m": m, "n": 512, "k": 6144} for m in (1, 16, 128)]
    assert {s.label for s in shapes} == {"gemm_fp4_n512_k6144"}
    with pytest.raises(BadInput, match="no gemm_fp4 definition"):
        file_shapes(dump / "rmsnorm_h6144.json", MM)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"m": 1, "n": 0, "k": 8}\n')
    with pytest.raises(BadInput, match=">= 1"):
        file_shapes(bad, MM)
    with pytest.raises(BadInput, match="needs integer"):
        file_shapes(jsonl, MOE)
    with pytest.raises(BadInput, match="unknown kernel op"):
        get_op("flashinfer.mm_fp5")


def test_every_registered_op_has_its_in_env_half():
    text = (PROBES_DIR / "kernel_bench.py").read_text()
    for name in OPS:
        assert f'name = "{name}"' in text, name


# ------------------------------------------------------------------------------- the probe itself

SHAPES = [Shape({"m": m, "n": 32, "k": 64}, "t") for m in (1, 4, 8, 16)]
FAST = Settings(warmup=1, iters=3, trials=4, flush_mb=1)


def _record(recipe: str, result: dict) -> dict:
    """A kernel record as `patchbench kernels` stores it, around a real probe result."""
    return {"recipe": recipe, "recipe_resolved": {"roofline": {"gpu": "h200"}, "description": recipe},
            "env_key": "0" * 16, "tree_hashes": {}, "arch_list": [], "op": TEST.name, "backend": "torch",
            "settings": FAST.to_dict(), "shapes_from": "test", "machine": {},
            "probe": {k: result.get(k) for k in ("versions", "device", "gpu", "flush_bytes")},
            "results": result["results"]}


@pytest.fixture(scope="module")
def measured():
    """The torch test op timed in a real torch venv: as it is, and broken for M >= 8 by its
    environment variable (as a recipe's [server.env] would set it)."""
    py = base_torch_python()
    env = {"PATH": "/usr/bin:/bin"}
    broken_env = {**env, "PATCHBENCH_TEST_OP_ZEROS_FROM_M": "8"}
    base = measure(py, TEST, SHAPES, backend="torch", environ=env, settings=FAST)
    broken = measure(py, TEST, SHAPES, backend="torch", environ=broken_env, settings=FAST)
    return {"python": py, "env": env, "base": base, "broken": broken}


def test_probe_times_trials_with_a_cold_l2_and_flags_zeros_from_m8(measured):
    res = measured["broken"]
    assert res["backends"] == ["torch"] and "torch" in res["versions"] and res["device"] == "cpu"
    assert res["flush_bytes"] == 1 << 20
    verdicts = {r["shape"]["m"]: r["correctness"]["verdict"] for r in res["results"]}
    assert verdicts == {1: "ok", 4: "ok", 8: "all-zero", 16: "all-zero"}
    assert {r["correctness"]["verdict"] for r in measured["base"]["results"]} == {"ok"}
    for r in res["results"]:
        assert [len(t) for t in r["times_ms"]] == [3, 3, 3, 3]  # trials x iterations
        assert r["flushes"] == 12  # one L2 flush before every timed call
        assert all(t > 0 for trial in r["times_ms"] for t in trial)
        c = r["correctness"]
        if r["shape"]["m"] < 8:
            assert c["within_tolerance"] == 1.0 and c["max_relative_error"] < 0.02 and c["non_finite"] == 0
        else:
            assert c["all_zero"] and c["within_tolerance"] < 0.5


def test_per_shape_comparison_calls_a_wrong_candidate_wrong_never_faster(measured):
    base, broken = _record("a", measured["base"]), _record("b", measured["broken"])
    by_m = {c.dims["m"]: c for c in compare(base, broken)}
    assert by_m[8].verdict == by_m[16].verdict == WRONG
    assert by_m[1].verdict not in (WRONG, FIXED) and by_m[4].verdict not in (WRONG, FIXED)
    lo, hi = by_m[1].speedup_ci  # (nan, nan) where CPU trials too noisy to bound the ratio (stats.ratio_ci)
    assert lo <= by_m[1].speedup <= hi or (math.isnan(lo) and math.isnan(hi))
    assert {c.verdict for c in compare(broken, base) if c.dims["m"] >= 8} == {FIXED}
    r = rows(base)[0]
    assert r.floor_ms > 0 and 0 < r.efficiency < 1 and r.tflops > 0  # the h200 roofline floor


def test_export_as_flashinfer_bench_traces(measured, tmp_path):
    out = export([_record("demo/zeros", measured["broken"])], tmp_path / "fib")
    assert out["definitions"] == 1 and out["traces"] == 4 and out["solutions"] == 1
    root = tmp_path / "fib"
    traces = [json.loads(x) for x in (root / "traces" / "patchbench" / "gemm_bf16" / "gemm_bf16_n32_k64.jsonl")
              .read_text().splitlines()]
    status = {t["workload"]["axes"]["M"]: t["evaluation"]["status"] for t in traces}
    assert status == {1: "PASSED", 4: "PASSED", 8: "INCORRECT_NUMERICAL", 16: "INCORRECT_NUMERICAL"}
    for t in traces:
        ev = t["evaluation"]
        assert ("performance" in ev) == (ev["status"] == "PASSED") and "correctness" in ev
        assert t["solution"] == "patchbench_demo_zeros_torch_000000000000"
    d = json.loads((root / "definitions" / "gemm_bf16_n32_k64.json").read_text())
    assert d["axes"] == {"M": {"type": "var"}, "N": {"type": "const", "value": 32}, "K": {"type": "const", "value": 64}}
    compile(d["reference"], "reference", "exec")
    sol = json.loads(next((root / "solutions").rglob("*.json")).read_text())
    assert sol["definition"] == d["name"] and sol["spec"]["entry_point"] == "main.py::run"
    compile(sol["sources"][0]["content"], "main.py", "exec")
    assert len((root / "workloads" / "gemm_bf16_n32_k64.jsonl").read_text().splitlines()) == 4


def test_report_section_has_the_table_and_the_plot(measured, tmp_path):
    home = tmp_path / "home"
    records.save(home, _record("a", measured["base"]))
    records.save(home, _record("b", measured["broken"]))
    sec = kernel_section(home, ["a", "b"], tmp_path)
    md = "\n".join(sec.markdown)
    assert "Kernel tables" in md and md.count("wrong output") >= 2
    assert (tmp_path / "kernels_0.png").stat().st_size > 0 and "<svg" in sec.html


def test_tables_of_two_gpu_keys_or_trial_settings_are_not_compared(measured, tmp_path):
    """Issue 29: no faster/slower between records timed on different GPUs or with other trial
    settings; a candidate's older record under the baseline's conditions is used, and said so."""
    from toolkit.errors import BadInput
    from toolkit.kernels.compare import compare_recipes

    home = tmp_path / "home"
    on = lambda gpu, result, **settings: {**_record("x", result), "machine": {"gpu_key": gpu},  # noqa: E731
                                          "settings": {**FAST.to_dict(), **settings}}
    records.save(home, {**on("1x NVIDIA H200", measured["base"]), "recipe": "a"})
    records.save(home, {**on("1x NVIDIA B200", measured["base"]), "recipe": "b"})
    records.save(home, {**on("1x NVIDIA H200", measured["base"], trials=6), "recipe": "c"})
    # tuned against FlashInfer's default tactics (--no-autotune, or a server that does not tune), graph
    # replays against eager calls (--no-cuda-graph: Python dispatch timed): the method, not the build, differs
    records.save(home, {**on("1x NVIDIA H200", measured["base"], autotune=False), "recipe": "e"})
    records.save(home, {**on("1x NVIDIA H200", measured["base"], cuda_graph=False), "recipe": "f"})
    for cand, differs in (("b", "GPU key 1x NVIDIA H200 vs 1x NVIDIA B200"), ("c", "trials 4 vs 6"),
                          ("e", "autotune True vs False"), ("f", "cuda_graph True vs False")):
        with pytest.raises(BadInput, match=differs):
            compare_recipes(home, ["a", cand])
        md = "\n".join(kernel_section(home, ["a", cand], tmp_path).markdown)
        assert f"{cand} against a: test.matmul (torch) not compared, no speedup stated: {differs}" in md
        assert f"{cand} us |" not in md and "speedup [95% CI]" not in md and "| faster" not in md and "| slower" not in md
    # one comparable candidate among two: compared, the other one's reason printed beside it
    records.save(home, {**on("1x NVIDIA H200", measured["broken"]), "recipe": "d"})
    records.save(home, {**on("1x NVIDIA B200", measured["base"]), "recipe": "d"})
    items, data = compare_recipes(home, ["a", "b", "d"])
    assert data["variants"]["b"][0]["not_compared"] == ["GPU key 1x NVIDIA H200 vs 1x NVIDIA B200"]
    d = data["variants"]["d"][0]
    assert d["gpu_key"] == "1x NVIDIA H200" and "left out: GPU key 1x NVIDIA H200 vs 1x NVIDIA B200" in d["notes"][0]
    assert {r["dims"]["m"]: r["verdict"] for r in d["rows"]}[16] == WRONG  # the H200 record, not the newer B200 one
    md = "\n".join(kernel_section(home, ["a", "b", "d"], tmp_path).markdown)
    assert "| d us |" in md and "| b us |" not in md and "b against a: test.matmul (torch) not compared" in md


# ------------------------------------------------------------------------------------ CLI e2e


@pytest.mark.slow
def test_kernels_cli_compare_export_report_and_no_gpu(tmp_path, monkeypatch, home, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "torch-zeros.toml").write_text(
        'description = "the torch demo whose test op returns zeros for M >= 8"\n'
        'extends = "demo/torch-baseline"\n[server.env]\nPATCHBENCH_TEST_OP_ZEROS_FROM_M = "8"\n')
    shapes = tmp_path / "shapes.jsonl"
    shapes.write_text("".join(json.dumps({"m": m, "n": 32, "k": 64}) + "\n" for m in (1, 4, 8, 16)))
    common = ["--op", "test.matmul", "--shapes", str(shapes), "--trials", "4", "--iters", "3", "--warmup", "1",
              "--flush-mb", "1"]
    assert main(["kernels", "demo/torch-baseline", *common]) == 0
    [rec] = records.latest(home, "demo/torch-baseline", "test.matmul", None)
    # the table says whether the recipe's server tunes FlashInfer (this env has no sglang: not read)
    assert any("was not read for this release" in n for n in rec["configuration"]["server_notes"])
    assert rec["settings"]["autotune"] is True
    assert main(["kernels", "demo/torch-zeros", *common]) == 1  # a shape failed its check
    capsys.readouterr()
    assert main(["compare", "demo/torch-baseline", "demo/torch-zeros", "--kernels-table", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] >= 1
    rows = data["variants"]["demo/torch-zeros"][0]["rows"]
    by_m = {r["dims"]["m"]: r for r in rows}
    assert by_m[8]["verdict"] == by_m[16]["verdict"] == "wrong output"
    lo, hi = by_m[1]["speedup_ci"]  # [None, None]: CPU trials too noisy to bound the ratio (stats.ratio_ci)
    assert by_m[1]["verdict"] != "wrong output" and ((lo is None and hi is None) or lo <= hi)
    assert all(r["baseline"]["efficiency"] > 0 for r in rows)  # the roofline floor of the recipe's GPU
    # flashinfer-bench traces
    out = tmp_path / "fib"
    assert main(["kernels", "demo/torch-zeros", "--op", "test.matmul", "--export", str(out)]) == 0
    traces = [json.loads(x) for x in (out / "traces" / "patchbench" / "gemm_bf16" / "gemm_bf16_n32_k64.jsonl")
              .read_text().splitlines()]
    status = {t["workload"]["axes"]["M"]: t["evaluation"]["status"] for t in traces}
    assert status == {1: "PASSED", 4: "PASSED", 8: "INCORRECT_NUMERICAL", 16: "INCORRECT_NUMERICAL"}
    for t in traces:
        assert ("performance" in t["evaluation"]) == (t["evaluation"]["status"] == "PASSED")
        assert t["solution"].startswith("patchbench_demo_torch-zeros_torch")
    definition = json.loads((out / "definitions" / "gemm_bf16_n32_k64.json").read_text())
    assert definition["axes"]["M"] == {"type": "var"} and definition["axes"]["N"]["value"] == 32
    assert list((out / "solutions").rglob("*.json"))
    # the report: the kernel table and its plot
    rep = tmp_path / "rep"
    assert main(["report", "demo/torch-baseline", "demo/torch-zeros", "-o", str(rep)]) == 0
    md = (rep / "report.md").read_text()
    assert "Kernel tables" in md and "wrong output" in md and (rep / "kernels_0.png").stat().st_size > 0
    assert "<svg" in (rep / "report.html").read_text()
    # without a GPU: a CUDA op stops with exit 3 after the env said it has the op
    import toolkit.run.machine as machine

    if not machine.has_cuda_gpu():
        capsys.readouterr()
        assert main(["kernels", "demo/torch-baseline", *common, "--device", "cuda"]) == 3
        assert "has test.matmul" in capsys.readouterr().err
    # an env without FlashInfer says so before anything is timed
    capsys.readouterr()
    assert main(["kernels", "demo/torch-baseline", "--op", "flashinfer.mm_fp4", "--shapes", str(shapes)]) == 1
    assert "cannot run flashinfer.mm_fp4" in capsys.readouterr().err
    with pytest.raises(Exception, match="cannot run flashinfer.mm_fp4"):
        check_op(base_torch_python(), MM, {"PATH": "/usr/bin:/bin"})


NVFP4_ROUNDTRIP = r'''
import sys, torch
sys.path.insert(0, sys.argv[1])
import kernel_bench as kb
torch.manual_seed(0)
rows, cols = 200, 96          # padded to 256 rows and 8 (not 6) scale columns: 2 x 2 tiles
x = torch.randn(rows, cols)
gs = kb.FP4_GLOBAL / x.abs().max()
grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
blocks = x.reshape(rows, cols // 16, 16)
scale = (blocks.abs().amax(-1) / 6.0 * gs).to(torch.float8_e4m3fn)         # E4M3 block scales
scaled = blocks / (scale.float() / gs).clamp_min(1e-12).unsqueeze(-1)
mag = (scaled.abs().unsqueeze(-1) - grid).abs().argmin(-1)                   # nearest E2M1 magnitude
code = (mag + 8 * (scaled < 0)).reshape(rows, cols).to(torch.uint8)
packed = code[:, 0::2] | (code[:, 1::2] << 4)                                # low nibble first
# CUTLASS's 128x4 scale-factor layout, written from its formula
R, C = -(-rows // 128) * 128, -(-(cols // 16) // 4) * 4
sf = torch.zeros(R * C, dtype=torch.uint8)
for r in range(rows):
    for c in range(cols // 16):
        off = ((r // 128) * (C // 4) + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
        sf[off] = scale[r, c].view(torch.uint8)
deq = kb.dequant_nvfp4(torch, packed, sf.view(torch.float8_e4m3fn), gs, rows, cols)
want = (grid[mag] * torch.where(scaled < 0, -1.0, 1.0) * (scale.float() / gs).unsqueeze(-1)).reshape(rows, cols)
assert torch.equal(deq, want), (deq - want).abs().max()
assert kb._cos(torch, deq, x) > 0.98, kb._cos(torch, deq, x)
print("ok")
'''


def test_nvfp4_dequantization_reads_the_swizzled_scale_layout(tmp_path):
    """The reference dequantizes E2M1 nibbles (low first) times E4M3 scales stored in CUTLASS's
    128x4 swizzled layout: checked against a quantizer that writes that layout from its formula."""
    script = tmp_path / "roundtrip.py"
    script.write_text(NVFP4_ROUNDTRIP)
    out = subprocess.run([str(base_torch_python()), str(script), str(PROBES_DIR)], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
