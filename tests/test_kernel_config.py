"""Kernel tables time what the server runs (no GPU here: what can be checked on CPU is): the MoE call
configured as sglang 0.5.23's flashinfer_cutlass runner configures it, FlashInfer's autotuner entered
over the first warmup call as sglang enters it, only mm_fp4 backends that can take the probe's call
offered (and the rest said), and the configuration kept with the record. Kernel execution, the
autotuner's choices and CUDA-graph replay need a GPU: benchmarks/kernels_gpu.py checks them there."""

from __future__ import annotations

import contextlib
import sys
import types
from types import SimpleNamespace
from typing import Literal

import pytest

from toolkit.errors import BadInput
from toolkit.kernels.bench import server_kernel_config
from toolkit.kernels.measure import Settings, job_of
from toolkit.kernels.registry import get_op
from toolkit.kernels.shapes import Shape
from toolkit.resources import PROBES_DIR

sys.path.insert(0, str(PROBES_DIR))
import kernel_bench as kb  # noqa: E402  (the probe, importable without torch)
import kernel_timing as kt  # noqa: E402


@pytest.mark.parametrize("args, env, want", [
    ({}, {}, {"use_fused_finalize": False, "tune_max_num_tokens": 8192}),
    ({}, {"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": "1"}, {"use_fused_finalize": True}),
    ({}, {"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": "Yes"}, {"use_fused_finalize": True}),
    ({"chunked-prefill-size": 4096}, {}, {"tune_max_num_tokens": 4096}),
    # attention DP: 0.5.23 divides the chunk among the attention-DP ranks, then the runner multiplies back
    ({"chunked-prefill-size": 1024, "dp-size": 4, "enable-dp-attention": True}, {}, {"tune_max_num_tokens": 1024}),
    ({"chunked-prefill-size": 4096, "attn-dp-size": 4}, {}, {"tune_max_num_tokens": 4096}),  # 0.5.23's spelling
    ({"chunked-prefill-size": 1026, "attn-dp-size": 4}, {}, {"tune_max_num_tokens": 1024}),  # 256 a rank
    ({"chunked-prefill-size": -1, "attn-dp-size": 4, "max-prefill-tokens": 4096}, {}, {"tune_max_num_tokens": 8192}),
    ({"chunked-prefill-size": 4096, "dp-size": 4}, {}, {"tune_max_num_tokens": 4096}),  # DP without DP attention
    ({"chunked-prefill-size": -1, "max-prefill-tokens": 2048}, {}, {"tune_max_num_tokens": 2048}),
    ({"disaggregation-mode": "decode"}, {}, {"tune_max_num_tokens": "per-call"}),
])
def test_the_moe_call_is_configured_as_sglangs_runner_configures_it(args, env, want):
    got = server_kernel_config(args, env)
    assert {k: got[k] for k in want} == want


def test_an_assumed_tune_range_is_said_and_a_bad_flag_refused():
    assert "sets no chunked-prefill-size" in server_kernel_config({}, {})["notes"][0]
    assert server_kernel_config({"chunked-prefill-size": 2048}, {})["notes"] == []
    ep8 = server_kernel_config({"chunked-prefill-size": 2048, "tp-size": 8, "ep-size": 8}, {})["notes"]
    assert len(ep8) == 1 and ep8[0].startswith("EP 8: the MoE probe times one rank's share as a call of its own")
    with pytest.raises(BadInput, match="SGLANG_FLASHINFER_MOE_FUSED_FINALIZE='maybe'"):
        server_kernel_config({}, {"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": "maybe"})


def _resolved(args: dict) -> dict:
    """sglang's own resolution of `args` (the miniature's ServerArgs, as sglang 0.5.23 resolves these fields)
    presented as 8x RTX PRO 6000: what `patchbench kernels` reads through kernels/static_layout.py."""
    import os
    from pathlib import Path

    from toolkit.recipe.spec import ServerSpec, TargetSpec
    from toolkit.recipe.target import target_facts
    from toolkit.run.sglang_args import static_check

    mini = Path(__file__).resolve().parent.parent / "upstream" / "minisglang" / "python"
    c = static_check(Path(sys.executable), ServerSpec(model="minisglang/tiny", args=tuple(args.items())), {},
                     environ={**os.environ, "PYTHONPATH": str(mini)}, device="cuda",
                     target=target_facts(TargetSpec("rtx-pro-6000", 8)))
    assert c.ok and c.resolved_config
    return c.resolved_config


def test_the_call_is_configured_at_the_layout_sglang_resolves_not_the_flags():
    # --moe-a2a-backend deepep: sglang runs EP = TP (8) whatever the flags say; the flags read EP 1
    flags = {"tp-size": 8, "moe-a2a-backend": "deepep", "chunked-prefill-size": 4096}
    resolved = _resolved(flags)
    assert resolved["ep_size"] == 8
    assert not any(n.startswith("EP ") for n in server_kernel_config(flags, {})["notes"])
    got = server_kernel_config(flags, {}, resolved)
    assert any(n.startswith("EP 8: the MoE probe times one rank's share") for n in got["notes"])
    # no chunk in the flags: sglang sizes one (the miniature: 8192, divided per attention-DP rank, 2048);
    # the runner multiplies the per-rank chunk back: 8192, not the resolved chunk divided a second time
    flags = {"tp-size": 8, "attn-dp-size": 4}
    resolved = _resolved(flags)
    assert (resolved["chunked_prefill_size"], resolved["attn_dp_size"]) == (2048, 4)
    got = server_kernel_config(flags, {}, resolved)
    assert got["tune_max_num_tokens"] == 8192 and not any("sets no chunked" in n for n in got["notes"])
    got = server_kernel_config({"tp-size": 8, "attn-dp-size": 4, "chunked-prefill-size": 1024}, {},
                               _resolved({"tp-size": 8, "attn-dp-size": 4, "chunked-prefill-size": 1024}))
    assert got["tune_max_num_tokens"] == 1024
    # no resolution (an env without sglang): the flags, and why
    got = server_kernel_config(flags, {}, {}, "no static resolution: no sglang in the env")
    assert got["notes"][0] == ("EP, attention DP and the prefill chunk read from the recipe's flags "
                               "(no static resolution: no sglang in the env)")


def test_the_job_carries_the_server_config_and_how_to_time():
    job = job_of(get_op("flashinfer.cutlass_fused_moe"), [Shape({"tokens": 8, "experts": 32, "top_k": 8,
                                                                 "hidden": 256, "inter": 128}, "x")],
                 backend="cutlass", settings=Settings(), server={"use_fused_finalize": False, "tune_max_num_tokens": 8192})
    assert job["server"] == {"use_fused_finalize": False, "tune_max_num_tokens": 8192}
    assert job["autotune"] is True and job["cuda_graph"] is True
    assert job_of(get_op("test.matmul"), [], backend="torch", settings=Settings(autotune=False))["autotune"] is False


def _mm(backends, cc=(10, 0)):
    """The probe's mm_fp4 op over a FlashInfer stand-in offering `backends` on compute capability `cc`."""
    def mm_fp4(a, b, a_descale, b_descale, alpha=None, out_dtype=None, out=None, block_size=16,
               use_8x4_sf_layout=False, backend="auto", use_nvfp4=True):
        raise AssertionError("no kernel runs on CPU")

    mm_fp4.__annotations__["backend"] = Literal[tuple(backends) + ("auto",)]  # as FlashInfer annotates it
    mm_fp4.is_backend_supported = lambda b, c: c == cc[0] * 10 + cc[1]
    op = kb.MmFp4.__new__(kb.MmFp4)
    op.fn, op.device, op.not_offered, op.configuration = mm_fp4, "cuda", {}, {}
    op.torch = SimpleNamespace(cuda=SimpleNamespace(get_device_capability=lambda: cc))
    return op


def test_only_backends_that_can_take_the_probes_call_are_offered():
    op = _mm(("cudnn", "trtllm", "cutlass", "cute-dsl", "cutedsl_low_latency", "b12x", "cake"))
    assert op.backends() == ["cudnn", "trtllm", "cutlass", "cute-dsl", "cutedsl_low_latency", "b12x"]
    assert op.not_offered == {"cake": "cake: per-row alpha only (alpha of shape [M]); the probe's call passes "
                                      "one scalar alpha"}
    assert kb.call_limit("cutedsl_low_latency", {"m": 8, "n": 512, "k": 6144}) is None
    assert "M <= 8" in kb.call_limit("cutedsl_low_latency", {"m": 16, "n": 512, "k": 6144})
    assert kb.call_limit("cutlass", {"m": 4096, "n": 512, "k": 6144}) is None


def test_a_shape_the_backend_cannot_take_is_skipped_and_said():
    op = _mm(("cutedsl_low_latency",))
    res = kb.measure_shape(None, op, "cuda", {"m": 128, "n": 512, "k": 6144}, {"backend": "cutedsl_low_latency"}, None)
    assert res == {"shape": {"m": 128, "n": 512, "k": 6144}, "status": "skipped",
                   "error": "not run: cutedsl_low_latency: M <= 8 and K divisible by 64 only"}


@pytest.fixture
def fake_flashinfer(monkeypatch):
    """flashinfer stand-ins: an autotuner that records whether a call ran inside it, and a
    cutlass_fused_moe with (or without) the runner's arguments."""
    seen = {"tuning": False, "autotune": [], "v2": []}

    @contextlib.contextmanager
    def autotune(tune_mode=True, **kw):
        seen["autotune"].append(tune_mode)
        seen["tuning"] = True
        yield
        seen["tuning"] = False

    @contextlib.contextmanager
    def autotune_v2(**kw):
        seen["v2"].append(kw)
        yield

    def cutlass_fused_moe(input, token_selected_experts, token_final_scales, fc1_expert_weights,
                          fc2_expert_weights, output_dtype, quant_scales, output=None, tune_max_num_tokens=8192,
                          use_fused_finalize=None):
        raise AssertionError("no kernel runs on CPU")

    fi = types.ModuleType("flashinfer")
    fi.autotune_v2 = autotune_v2
    fi.fused_moe = types.ModuleType("flashinfer.fused_moe")
    fi.fused_moe.cutlass_fused_moe = cutlass_fused_moe
    tuner = types.ModuleType("flashinfer.autotuner")
    tuner.autotune = autotune
    for name, mod in (("flashinfer", fi), ("flashinfer.fused_moe", fi.fused_moe), ("flashinfer.autotuner", tuner)):
        monkeypatch.setitem(sys.modules, name, mod)
    return seen


def test_the_moe_probe_passes_the_runners_arguments(fake_flashinfer):
    op = kb.CutlassFusedMoe(None, "cuda", {"use_fused_finalize": False, "tune_max_num_tokens": 4096})
    assert op.kwargs == {"use_fused_finalize": False, "tune_max_num_tokens": 4096}
    assert op.configuration == op.kwargs
    sys.modules["flashinfer"].fused_moe.cutlass_fused_moe = lambda input, output=None: None  # an older FlashInfer
    old = kb.CutlassFusedMoe(None, "cuda", {"use_fused_finalize": False, "tune_max_num_tokens": 4096})
    assert old.kwargs == {} and set(old.configuration["not_passed"]) == {"use_fused_finalize", "tune_max_num_tokens"}


def test_the_autotuner_is_entered_over_the_first_warmup_call_as_sglang_enters_it(fake_flashinfer):
    calls = []
    op = SimpleNamespace(tunable=True)
    tuner, said = kt.autotuner(op, {"autotune": True})
    kt.warm_up(None, "cpu", lambda: calls.append(fake_flashinfer["tuning"]), 3, tuner)
    assert calls == [True, False, False]
    assert fake_flashinfer["autotune"] == [True]
    assert fake_flashinfer["v2"] == [{"mode": "tune", "persistent_cache": False}]
    assert said.startswith("on, over the first warmup call: flashinfer.autotuner.autotune(True) + autotune_v2")
    assert kt.autotuner(op, {"autotune": False})[1].startswith("off (--no-autotune)")
    assert kt.autotuner(SimpleNamespace(tunable=False), {})[1].startswith("not applicable")


def test_without_flashinfers_autotuner_the_table_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer.autotuner", None)
    assert kt.autotuner(SimpleNamespace(tunable=True), {})[1] == \
        "unavailable: this FlashInfer has no flashinfer.autotuner"


def test_the_record_keeps_the_configuration_and_what_was_left_out(tmp_path, monkeypatch):
    from toolkit.kernels import bench

    info = {"ok": True, "backends": ["cutlass"], "versions": {"flashinfer-python": "0.7.4"},
            "not_offered": {"cake": "cake: per-row alpha only"},
            "configuration": {"alpha": "scalar", "autotune": "on"}}
    env = SimpleNamespace(python="py", key="k" * 16, run_environ=lambda: {})
    recipe = SimpleNamespace(name="r/x", server=SimpleNamespace(env={}, args={"chunked-prefill-size": 2048}),
                             build=SimpleNamespace(arch=[]), to_dict=lambda: {})
    monkeypatch.setattr("toolkit.run.pipeline.prepare", lambda *a, **k: SimpleNamespace(env=env, trees=[], recipe=recipe))
    monkeypatch.setattr(bench, "check_op", lambda *a, **k: info)
    # sglang's static resolution of the recipe's flags (the env's sglang probe; kernels/static_layout.py)
    monkeypatch.setattr("toolkit.kernels.static_layout.static_resolution",
                        lambda *a, **k: ({"tp_size": 1, "chunked_prefill_size": 2048}, None))
    sent = {}

    def measure(python, op, shapes, **kw):
        sent.update(kw)
        return {**info, "results": []}

    monkeypatch.setattr(bench, "measure", measure)
    monkeypatch.setattr(bench.machine, "has_cuda_gpu", lambda: True)
    op = get_op("flashinfer.mm_fp4")
    with pytest.raises(BadInput) as err:
        bench.run_kernels(recipe, op, [], home=tmp_path, shapes_from="t", backends=["cake"])
    assert "cake: per-row alpha only" in err.value.hint
    run = bench.run_kernels(recipe, op, [], home=tmp_path, shapes_from="t")
    (rec,) = run.records
    assert rec["not_offered"] == {"cake": "cake: per-row alpha only"}
    assert rec["configuration"]["autotune"] == "on"
    assert [n for n in rec["configuration"]["server_notes"] if "not read for this release" not in n] == [
        "the server's FP4 GEMM backend: unknown (auto is decided by the GPU, and the recipe names no target GPU)"]
    assert sent["server"]["tune_max_num_tokens"] == 2048 and sent["server"]["use_fused_finalize"] is False
    assert sent["settings"].autotune is True
    # a recipe pinned to sglang 0.5.10 with the flashinfer_cutlass runner: its server never tunes, the table neither
    info["versions"]["sglang"] = "0.5.10.post1"
    recipe.server.args["moe-runner-backend"] = "flashinfer_cutlass"
    (rec,) = bench.run_kernels(recipe, op, [], home=tmp_path, shapes_from="t", follow_server=True).records
    assert sent["settings"].autotune is False and rec["settings"]["autotune"] is False
    assert any("default tactics" in n for n in rec["configuration"]["server_notes"])
    # sglang resolved the runner the flags leave at auto: the table follows what it resolved
    recipe.server.args["moe-runner-backend"] = "auto"
    monkeypatch.setattr("toolkit.kernels.static_layout.static_resolution",
                        lambda *a, **k: ({"tp_size": 1, "chunked_prefill_size": 2048,
                                          "moe_runner_backend": "flashinfer_trtllm"}, None))
    (rec,) = bench.run_kernels(recipe, op, [], home=tmp_path, shapes_from="t", follow_server=True).records
    assert sent["settings"].autotune is True
    assert any("tunes FlashInfer for --moe-runner-backend flashinfer_trtllm" in n
               for n in rec["configuration"]["server_notes"])


def test_the_probe_says_how_it_timed_on_cpu():
    from conftest import base_torch_python
    from toolkit.kernels.measure import measure

    res = measure(base_torch_python(), get_op("test.matmul"), [Shape({"m": 4, "n": 16, "k": 32}, "t")],
                  backend="torch", environ={"PATH": "/usr/bin:/bin"},
                  settings=Settings(warmup=2, iters=2, trials=2, flush_mb=1))
    assert res["configuration"]["autotune"].startswith("not applicable")
    (r,) = res["results"]
    assert r["status"] == "ok" and r["timing"] == "eager calls (wall clock on CPU)" and r["flushes"] == 4
    assert res["not_offered"] == {}


def test_a_skipped_shape_reads_skipped_in_the_table_never_error():
    from rich.console import Console

    from toolkit.kernels import table

    skipped = {"shape": {"m": 128, "n": 512, "k": 6144}, "status": "skipped",
               "error": "not run: cutedsl_low_latency takes M <= 8"}
    record = {"recipe": "tiles", "op": "flashinfer.mm_fp4", "backend": "cutedsl_low_latency", "results": [skipped]}
    (row,) = table.rows(record)
    assert (row.status, row.verdict) == ("skipped", "skipped")
    (cmp,) = table.compare(record, record)
    assert cmp.verdict == "skipped"
    console = Console(width=250, record=True)
    console.print(table.render_rows(record))
    text = console.export_text()
    assert "skipped: not run: cutedsl_low_latency takes M <= 8" in text and "error" not in text


def test_the_table_tunes_where_the_recipes_sglang_tunes():
    """sglang 0.5.23 tunes FlashInfer for the flashinfer_cutlass runner; 0.5.10 tunes only for the
    trtllm/mxfp4 MoE runners and serves flashinfer_cutlass on FlashInfer's default tactics; a server
    told --disable-flashinfer-autotune never tunes; a release not read is tuned and said so."""
    from toolkit.kernels.server_tuning import server_autotunes

    cutlass = {"moe-runner-backend": "flashinfer_cutlass", "quantization": "modelopt_fp4"}
    assert server_autotunes("0.5.23", cutlass)[0] is True
    tunes, why = server_autotunes("0.5.10.post1", cutlass)
    assert tunes is False and "default tactics" in why and "flashinfer_cutlass" in why
    assert server_autotunes("0.5.10.post1", {"moe_runner_backend": "flashinfer_trtllm"})[0] is True
    assert server_autotunes("0.5.10.post1", {})[0] is False  # auto is not in 0.5.10's list
    assert server_autotunes("0.5.23", {**cutlass, "disable-flashinfer-autotune": True})[0] is False
    # 0.5.23 skips the tuning under deterministic inference and KV cache sharding, whatever the runner
    tunes, why = server_autotunes("0.5.23", {**cutlass, "enable-deterministic-inference": True})
    assert tunes is False and "--enable-deterministic-inference" in why
    assert server_autotunes("0.5.23", {**cutlass, "enable_kv_cache_sharding": True})[0] is False
    tunes, why = server_autotunes(None, cutlass)
    assert tunes is True and "not read" in why
