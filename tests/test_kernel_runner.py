"""`patchbench kernels` times the MoE kernel the recipe's server runs, or says it does not: the MoE
runner sglang 0.5.23 resolves for the recipe (its static resolution, here stood in by 0.5.23-shaped
resolved dicts), and whether that server tunes FlashInfer at all. No GPU here: the CLI stops with
exit 3 (NoGPU) after these decisions, so the decisions and the output are what is checked."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from toolkit.cli import main
from toolkit.kernels.server_runner import op_mismatch, server_runner
from toolkit.kernels.server_tuning import server_autotunes

SM120, SM100, SM90 = (12, 0), (10, 0), (9, 0)
# the fields of a 0.5.23 resolved config (ServerArgs) these decisions read, as the static check reports them
RESOLVED = {"tp_size": 8, "ep_size": 1, "pp_size": 1, "dp_size": 1, "attn_dp_size": 1, "moe_dp_size": 1,
            "chunked_prefill_size": 8192, "quantization": "modelopt_fp4", "moe_a2a_backend": "none",
            "moe_runner_backend": "flashinfer_cutlass", "fp4_gemm_runner_backend": "auto",
            "disable_flashinfer_autotune": False, "enable_deterministic_inference": False}


@pytest.fixture
def cli(tmp_path, monkeypatch):
    """`patchbench kernels moe-tiles --op flashinfer.cutlass_fused_moe` with the env build, the static
    resolution (`resolved`) and the env's op check stood in; no GPU, so it ends at exit 3 past the checks."""
    from toolkit.kernels import bench

    monkeypatch.setenv("PATCHBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PATCHBENCH_GPUS", raising=False)
    state = {"resolved": dict(RESOLVED)}
    env = SimpleNamespace(python="py", key="k" * 16, run_environ=lambda: {})
    monkeypatch.setattr("toolkit.run.pipeline.prepare",
                        lambda recipe, *a, **k: SimpleNamespace(env=env, trees=[], recipe=recipe))
    monkeypatch.setattr("toolkit.kernels.static_layout.static_resolution", lambda *a, **k: (state["resolved"], None))
    monkeypatch.setattr(bench, "check_op", lambda *a, **k: {"ok": True, "backends": ["cutlass"],
                                                            "versions": {"sglang": "0.5.23"}})
    monkeypatch.setattr(bench.machine, "has_cuda_gpu", lambda: False)
    return state


def test_a_moe_op_the_server_never_runs_is_refused_and_named(cli, capsys):
    """moe-tiles on its SM120 target: sglang resolved flashinfer_trtllm (an explicit flag) or left `auto`
    (the NVFP4 MoE then builds flashinfer_trtllm on Blackwell): timing cutlass_fused_moe would time a kernel
    the server never calls. Refused (exit 2) with the runner and where it came from; --other-runner times it
    anyway, past the check (here: to the no-GPU stop)."""
    argv = ["kernels", "moe-tiles", "--op", "flashinfer.cutlass_fused_moe"]
    for runner, said in (("flashinfer_trtllm", "flashinfer_trtllm"), ("triton", "triton"),
                         ("auto", "flashinfer_trtllm")):
        cli["resolved"] = {**RESOLVED, "moe_runner_backend": runner}
        capsys.readouterr()
        assert main(argv) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"sglang's {said} MoE runner (sglang's static resolution)" in err, err
        assert "never runs" in err and "recipe moe-tiles" in err and "--other-runner" in err
    assert main([*argv, "--other-runner"]) == 3
    err = " ".join(capsys.readouterr().err.split())
    assert "NOT THE SERVER'S KERNEL" in err and "the server's MoE runner: flashinfer_trtllm" in err
    assert "modelopt_quant.py:3117" in err  # why `auto` is flashinfer_trtllm on SM120


def test_the_servers_own_runner_is_timed_and_said(cli, capsys):
    cli["resolved"] = dict(RESOLVED)
    assert main(["kernels", "moe-tiles", "--op", "flashinfer.cutlass_fused_moe"]) == 3  # past the check: no GPU
    err = " ".join(capsys.readouterr().err.split())
    assert "the server's MoE runner: flashinfer_cutlass (sglang's static resolution)" in err
    assert "NOT THE SERVER'S KERNEL" not in err
    # the dense FP4 GEMM op is told which backend the server's GEMMs use (auto on SM120: flashinfer_cutlass)
    assert main(["kernels", "tiles", "--op", "flashinfer.mm_fp4"]) == 3
    err = " ".join(capsys.readouterr().err.split())
    assert "the server's FP4 GEMM backend: flashinfer_cutlass (sglang's static resolution), mm_fp4 backend cutlass" \
        in err


def test_a_table_timed_with_other_runner_is_labelled_where_it_is_shown(cli, monkeypatch, tmp_path):
    from rich.console import Console

    from toolkit.kernels import bench, records
    from toolkit.kernels.table import render_rows
    from toolkit.report.kernels import kernel_section

    cli["resolved"] = {**RESOLVED, "moe_runner_backend": "flashinfer_trtllm"}
    monkeypatch.setattr(bench.machine, "has_cuda_gpu", lambda: True)
    monkeypatch.setattr(bench, "measure", lambda *a, **k: {"results": []})
    assert main(["kernels", "moe-tiles", "--op", "flashinfer.cutlass_fused_moe", "--other-runner"]) == 0
    [rec] = records.latest(tmp_path / "home", "moe-tiles", "flashinfer.cutlass_fused_moe", None)
    assert rec["server_runner"]["times_servers_kernel"] is False and rec["server_runner"]["moe"] == "flashinfer_trtllm"
    console = Console(width=300, record=True)
    console.print(render_rows(rec))
    assert "NOT THE SERVER'S KERNEL: ITS MOE RUNNER IS FLASHINFER_TRTLLM" in console.export_text()
    md = "\n".join(kernel_section(tmp_path / "home", ["moe-tiles"], tmp_path).markdown)
    assert "moe-tiles: not the server's kernel: its MoE runner is flashinfer_trtllm" in md


def test_the_runner_an_auto_config_becomes_per_gpu():
    """0.5.23 modelopt_quant.py create_moe_runner: auto -> marlin on SM80-SM9x, flashinfer_trtllm else; an
    unknown GPU leaves it unknown (labelled, not refused)."""
    auto = {**RESOLVED, "moe_runner_backend": "auto"}
    assert server_runner(auto, {}, SM90, "x").moe == "marlin"
    assert server_runner(auto, {}, SM100, "x").moe == "flashinfer_trtllm"
    unknown = server_runner(auto, {}, None, "x")
    assert unknown.moe is None and op_mismatch("flashinfer.cutlass_fused_moe", unknown) is None
    assert op_mismatch("flashinfer.mm_fp4", server_runner(auto, {}, SM100, "x")) is None
    # no resolution: the recipe's flags, with the CLI spelling of the FP4 GEMM backend
    flags = server_runner({}, {"moe-runner-backend": "flashinfer_cutlass", "fp4-gemm-backend": "flashinfer_cudnn"},
                          SM120, "the recipe's flags")
    assert (flags.moe, flags.fp4_gemm) == ("flashinfer_cutlass", "flashinfer_cudnn")
    assert server_runner(RESOLVED, {}, SM100, "x").fp4_gemm == "flashinfer_cutedsl"
    # MegaMoE all-to-all: FusedMoE.forward never runs, so cutlass_fused_moe is not the server's kernel
    mega = server_runner({**RESOLVED, "moe_a2a_backend": "megamoe"}, {}, SM100, "x")
    assert mega.moe == "megamoe" and "megamoe" in op_mismatch("flashinfer.cutlass_fused_moe", mega)


@pytest.mark.parametrize("resolved, capability, want, said", [
    (RESOLVED, SM120, True, "MoE runner flashinfer_cutlass"),
    # runner not in 0.5.23's list, but the NVFP4 model's dense GEMMs run on flashinfer_cutlass (auto on SM120)
    ({**RESOLVED, "moe_runner_backend": "auto"}, SM120, True, "dense FP4 GEMMs run on flashinfer_cutlass"),
    # ... and not when the FP4 GEMM backend is cuDNN: nothing asks for tuning
    ({**RESOLVED, "moe_runner_backend": "auto", "fp4_gemm_runner_backend": "flashinfer_cudnn"}, SM120, False,
     "none of its runner, FP4-GEMM or FP8-GEMM conditions hold"),
    # a bf16 model on the triton runner never tunes FlashInfer
    ({**RESOLVED, "moe_runner_backend": "triton", "quantization": None, "fp4_gemm_runner_backend": "marlin"},
     SM120, False, "does not tune FlashInfer for MoE runner triton"),
    # flashinfer_cutedsl under the deepep all-to-all is skipped before the runner list (flashinfer_autotune.py:112)
    ({**RESOLVED, "moe_runner_backend": "flashinfer_cutedsl", "moe_a2a_backend": "deepep"}, SM100, False,
     "under --moe-a2a-backend deepep"),
    # below compute capability 9 nothing tunes
    (RESOLVED, (8, 9), False, "capability >= 9 only"),
])
def test_0523_tunes_by_runner_fp4_backend_and_gpu(resolved, capability, want, said):
    fp4 = server_runner(resolved, {}, capability, "x").fp4_gemm
    tunes, why = server_autotunes("0.5.23", resolved, fp4_gemm=fp4, capability=capability)
    assert tunes is want and said in why, why
    assert ("default tactics" in why) is (not want)
