"""The static check for the RTX PRO 6000 x8 target against the real sglang 0.5.23 env of the shipped
recipes: sglang's own refusals (SBO + megamoe, EP3 on TP8) exit 2
at `run --until check`; baseline prints what sglang resolves (attention `dsa` for GLM-5 at TP8).
Slow: a full sglang env (shared with test_shipped_recipes) and a resolution of a few minutes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import TEST_CACHE, REPO_ROOT
from toolkit.cli import main

pytestmark = pytest.mark.slow

SHARED_HOME = TEST_CACHE  # conftest: one shared cache for every test


@pytest.fixture
def project(tmp_path):
    """A copy of the shipped recipes (with their locks) and the real patches, plus child recipes."""
    recipes = tmp_path / "recipes"
    shutil.copytree(REPO_ROOT / "recipes", recipes)
    (tmp_path / "patches").symlink_to(REPO_ROOT / "patches")
    (recipes / "sbo-megamoe.toml").write_text(
        'extends = "sbo"\n[server.args]\nmoe-a2a-backend = "megamoe"\n[expect]\nmoe_a2a_backend = "megamoe"\n')
    for runner in ("cutlass", "triton", "flashinfer_trtllm"):
        (recipes / f"{runner}-moe.toml").write_text(f'extends = "baseline"\n[server.args]\nmoe-runner-backend = "{runner}"\n'
                                                    f'[expect]\nmoe_runner_backend = "{runner}"\n')
    (recipes / "auto-moe.toml").write_text('extends = "baseline"\n[server.args]\nmoe-runner-backend = "auto"\n')
    (recipes / "ep8-deepep.toml").write_text('extends = "ep8"\n[server.args]\nmoe-a2a-backend = "deepep"\n'
                                             '[expect]\nmoe_a2a_backend = "deepep"\n')
    for name, arg in (("trtllm_mla", 'attention-backend = "trtllm_mla"'), ("flashmla", 'attention-backend = "flashmla"'),
                      ("dsa-trtllm", 'dsa-decode-backend = "trtllm"'), ("bf16-kv", 'kv-cache-dtype = "bfloat16"')):
        (recipes / f"attn-{name}.toml").write_text(f'extends = "baseline"\n[server.args]\n{arg}\n')
    (recipes / "ep3.toml").write_text('extends = "ep8"\n[server.args]\nep-size = "3"\n[expect]\nep_size = "3"\n')
    return recipes


def run_check(path: Path, capsys) -> tuple[int, str]:
    from toolkit.errors import PatchbenchError

    SHARED_HOME.mkdir(parents=True, exist_ok=True)
    try:
        rc = main(["run", str(path), "--until", "check", "--home", str(SHARED_HOME)])
    except PatchbenchError as exc:  # the CLI entry point turns these into exit codes
        rc, cap = exc.exit_code, capsys.readouterr()
        return rc, cap.out + cap.err + str(exc)
    cap = capsys.readouterr()
    return rc, cap.out + cap.err


def test_baseline_prints_what_sglang_resolves_for_the_target(project, capsys):
    rc, out = run_check(project / "baseline.toml", capsys)
    assert rc == 0, out
    assert "target: 8 x NVIDIA RTX PRO 6000" in " ".join(out.split())
    assert "unresolved" not in out and "static check passed" in out
    lines = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines() if ln.startswith("  ") and len(ln.split()) > 1}
    assert lines["attention_backend"] == ["dsa"]
    assert lines["kv_cache_dtype"] == ["fp8_e4m3"]
    assert lines["page_size"] == ["64"]
    assert "moe_runner_backend" in lines


def test_sbo_with_megamoe_exits_2_with_sglangs_reason(project, capsys):
    rc, out = run_check(project / "sbo-megamoe.toml", capsys)
    assert rc == 2, out
    out = " ".join(out.split())  # the console wraps long lines
    assert "megamoe has no two-batch / single-batch overlap decomposition" in out
    assert "refuses the configuration" in out


def test_ep3_on_tp8_exits_2_with_sglangs_reason(project, capsys):
    """With the MoE runner resolved (flashinfer_cutlass: the recipes pass --quantization modelopt_fp4)
    sglang's own validation refuses EP 3 on TP 8 before patchbench's model-shape rule would
    (tests/test_model_shape.py checks that rule)."""
    rc, out = run_check(project / "ep3.toml", capsys)
    assert rc == 2, out
    out = " ".join(out.split())
    assert "The expert parallel size must be 1 or the same as the tensor parallel size" in out
    assert "refuses the configuration" in out


def test_dp_attention_written_the_old_way_passes_and_is_checked_where_sglang_puts_it(project, capsys):
    """`--enable-dp-attention --dp-size 8` (deprecated, still accepted): sglang 0.5.23 moves the 8 to
    attn_dp_size and keeps dp_size 1, and gives each attention-DP rank 1/8 of the prefill chunk; the
    check passes, says so, and prints the fields."""
    (project / "dpa8.toml").write_text('extends = "baseline"\n[server.args]\nenable-dp-attention = true\n'
                                       'dp-size = 8\nchunked-prefill-size = 4096\n')
    rc, out = run_check(project / "dpa8.toml", capsys)
    assert rc == 0, out
    assert "reads --dp-size 8 as attn_dp_size = 8 (dp_size = 1)" in " ".join(out.split())
    lines = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines() if ln.startswith("  ") and len(ln.split()) > 1}
    assert lines["attn_dp_size"] == ["8"] and lines["dp_size"] == ["1"]
    assert "--chunked-prefill-size 4096 // 8 = 512" in " ".join(out.split())
    assert lines["chunked_prefill_size"] == ["512"]


@pytest.mark.parametrize("runner, why", [
    ("cutlass", "raises NotImplementedError when the NVFP4 MoE builds its runner at model load"),
    ("triton", "has no branch for it and raises NotImplementedError"),
    ("flashinfer_trtllm", "ships cubins for sm100/103/107 only"),
])
def test_a_runner_sglang_accepts_but_cannot_run_exits_2_before_a_launch(project, capsys, runner, why):
    """0.5.23 parses and resolves these MoE runners for an NVFP4 model on the SM120 target, then fails when
    the model loads or first runs: patchbench's release rules refuse them at the check (a sweep prunes
    them), not after a launch of minutes."""
    rc, out = run_check(project / f"{runner}-moe.toml", capsys)
    assert rc == 2, out
    out = " ".join(out.split())
    assert why in out, out[-1500:]


def test_auto_asks_sglang_to_choose_and_the_check_takes_its_choice(project, capsys):
    """`--moe-runner-backend auto` (sm120-backends' default name): sglang 0.5.23 resolves it to
    flashinfer_cutlass for modelopt_fp4 on SM120; `auto` implies no expectation, so the check passes
    and prints the resolved runner (it refused every `auto` variant as "expected 'auto'")."""
    rc, out = run_check(project / "auto-moe.toml", capsys)
    out = " ".join(out.split())
    assert rc == 0, out[-1500:]
    assert "moe_runner_backend flashinfer_cutlass" in out and "expected 'auto'" not in out


def test_deepep_with_the_nvfp4_cutlass_runner_exits_2_before_a_launch(project, capsys):
    """ep-vs-tp's DeepEP variant: the runner NVFP4 resolves to on SM120 has no fused function for the
    deepep all-to-all, and MoeRunner raises NotImplementedError at model load: refused at the check."""
    rc, out = run_check(project / "ep8-deepep.toml", capsys)
    out = " ".join(out.split())
    assert rc == 2, out[-1500:]
    assert "requires a fused func for a2a backend" in out, out[-1500:]


@pytest.mark.parametrize("name, why", [
    ("trtllm_mla", "--attention-backend trtllm_mla for a DSA model"),
    ("flashmla", "--attention-backend flashmla for a DSA model"),
    ("dsa-trtllm", "flash_mla_sm120.py:694-712"),
    # bf16 KV: 0.5.23 resolves GLM-5's DSA decode backend to trtllm on SM12x (`major >= 10`), whose
    # trtllm-gen kernels FlashInfer 0.7.2 runs on SM100/103/107 only
    ("bf16-kv", "fmhaRunner.cuh:37"),
])
def test_attention_sglang_accepts_for_glm5_but_cannot_run_on_sm120_exits_2_before_a_launch(project, capsys, name, why):
    """sm120-backends swept --attention-backend trtllm_mla and flashmla: 0.5.23 resolves both for GLM-5 on
    the SM120 target (and dsa_decode_backend trtllm), the check passed them, and each fails at model load."""
    rc, out = run_check(project / f"attn-{name}.toml", capsys)
    out = " ".join(out.split())
    assert rc == 2, out[-1500:]
    assert why in out, out[-1500:]


def test_sm120_backends_prefill_axis_is_accepted_and_checked_where_sglang_reads_it(project, capsys):
    """sm120-backends' attention axis is --dsa-prefill-backend (GLM-5's kernels are the DSA backend's): its
    second value, triton_sparse_mla, is one the DSA backend accepts for GLM on SM120 with fp8 KV."""
    (project / "sm120-triton-prefill.toml").write_text('extends = "sm120-backends"\n[server.args]\n'
                                                      'dsa-prefill-backend = "triton_sparse_mla"\n')
    rc, out = run_check(project / "sm120-triton-prefill.toml", capsys)
    out = " ".join(out.split())
    assert rc == 0, out[-1500:]
    assert "dsa_prefill_backend triton_sparse_mla" in out and "dsa_decode_backend flashinfer_sparse_mla" in out
    assert "attends densely" not in out
