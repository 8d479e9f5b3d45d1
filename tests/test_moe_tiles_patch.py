"""patches/flashinfer/sm120-moe-fp4-tiles.patch against the real flashinfer-python 0.7.2 sdist.

The patch puts a 128x32x64 tile into the SM120 NVFP4 grouped GEMM that cutlass_fused_moe runs for
GLM-5's experts. Every check runs the patched upstream code from a tree of the pinned sdist with the
patch applied by git (zero fuzz): its Python kernel generator (imported from the tree), one of the
instantiations it emits compiled by nvcc for sm_120a and read back with cuobjdump, the dispatch
gate compiled with static_asserts, and the autotuner's candidate list compiled and run on this CPU.
Slow tier (but the header check): nvcc over CUTLASS (~1.5 min on 2 cores, 5.7 GB at the peak), the sdist and
NVIDIA header wheels from PyPI; one worker runs them and the dense tile's compile (xdist group
`cutlass-compile`), one CUTLASS compile at a time.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TEST_CACHE, git_run
from flashinfer_sdist import (SDIST_KEEP, cublaslt_include, cuda_tools, described_files,  # noqa: F401 (fixtures)
                              flashinfer_sdist, list_elf_arches, unpack_subset)
from toolkit.envs.steps import flashinfer_sources as fk

REPO_ROOT = Path(__file__).resolve().parent.parent
PATCH = REPO_ROOT / "patches" / "flashinfer" / "sm120-moe-fp4-tiles.patch"
TILE = [128, 32, 64]  # elements, as the generator lists tiles (CtaShape128x32x32B: K in bytes of NVFP4)
NV = "csrc/nv_internal"
MOE_INL = "tensorrt_llm/kernels/cutlass_kernels/moe_gemm/launchers/moe_gemm_tma_ws_launcher.inl"


def _generator(tree: Path, name: str):
    """The tree's flashinfer/jit/gemm/cutlass package imported on its own (FlashInfer's package
    imports torch), under `name`; its generate_kernels module."""
    d = tree / "flashinfer" / "jit" / "gemm" / "cutlass"
    spec = importlib.util.spec_from_file_location(name, d / "__init__.py", submodule_search_locations=[str(d)])
    pkg = importlib.util.module_from_spec(spec)
    sys.modules[name] = pkg
    spec.loader.exec_module(pkg)
    return importlib.import_module(f"{name}.generate_kernels")


def _tile_ops(gen) -> list:
    return [op for op in gen.generate_sm120_grouped_gemm_operations(True) if list(op.cta_shape) == TILE]


def _module_flags(tree: Path) -> list[str]:
    """The `nvcc_flags` list literal of gen_cutlass_fused_moe_sm120_module in the tree's fused_moe.py."""
    mod = ast.parse((tree / "flashinfer" / "jit" / "fused_moe.py").read_text())
    func = next(n for n in mod.body if isinstance(n, ast.FunctionDef) and n.name == "gen_cutlass_fused_moe_sm120_module")
    node = next(n for n in ast.walk(func) if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "nvcc_flags" for t in n.targets))
    return list(ast.literal_eval(node.value))


def _moe_includes(tree: Path) -> list[str]:
    """The MoE module's extra include directories (fused_moe.py gen_cutlass_fused_moe_module)."""
    nv = tree / NV
    dirs = [nv, nv / "include", nv / "tensorrt_llm/cutlass_extensions/include",
            nv / "tensorrt_llm/kernels/cutlass_kernels/include", nv / "tensorrt_llm/kernels/cutlass_kernels"]
    return [f for d in dirs for f in ("-isystem", str(d))]


@pytest.fixture(scope="module")
def moe_tree(flashinfer_sdist, tmp_path_factory):
    """(tree, tile ops of the unpatched generator): the sdist subset the MoE module compiles from,
    committed, then the patch applied with git."""
    tree = tmp_path_factory.mktemp("moe") / "flashinfer"
    tree.mkdir()
    unpack_subset(flashinfer_sdist, tree, keep=(*SDIST_KEEP, f"{NV}/"))
    assert git_run(tree, "init", "-q").returncode == 0
    git_run(tree, "add", "-A", "-f")
    assert git_run(tree, "commit", "-q", "-m", "flashinfer-python 0.7.2 sdist (subset)").returncode == 0
    before = _tile_ops(_generator(tree, "fi_gen_unpatched"))
    check = git_run(tree, "apply", "--check", "-v", str(PATCH))  # no -C, no whitespace fixes: zero fuzz
    assert check.returncode == 0, check.stderr
    assert git_run(tree, "apply", str(PATCH)).returncode == 0
    return tree, before


def _nvcc(cuda_tools, cublaslt_include, tree: Path, source: Path, output: Path) -> subprocess.CompletedProcess:
    nvcc, _, extra = cuda_tools
    flags = fk.nvcc_flags_for_flashinfer(tree, "12.0a", module_flags=_module_flags(tree))
    cmd = [str(nvcc), *flags, *_moe_includes(tree), *extra, *cublaslt_include, "-c", str(source), "-o", str(output)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1800)


def test_patch_header_and_files():
    assert described_files(PATCH) == {"flashinfer/jit/gemm/cutlass/generate_kernels.py", "flashinfer/jit/fused_moe.py",
                     f"{NV}/tensorrt_llm/cutlass_extensions/include/cutlass_extensions/gemm_configs.h",
                     f"{NV}/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/moe_gemm_template_dispatch_tma_ws.h",
                     f"{NV}/tensorrt_llm/kernels/cutlass_kernels/cutlass_heuristic.cpp"}


@pytest.mark.slow
@pytest.mark.xdist_group("cutlass-compile")
def test_patched_generator_emits_the_tile_for_fp4_experts_only(moe_tree, tmp_path):
    tree, before = moe_tree
    assert before == []  # 0.7.2 has 128x32 only with K 128 and 256
    gen = _generator(tree, "fi_gen_patched_ops")
    ops = _tile_ops(gen)
    # both epilogue fusions x swap_ab x f16/bf16 output, all NVFP4 x NVFP4 (never the FP8 x FP4 mix)
    assert len(ops) == 8
    assert {(op.act_type, op.weight_type) for op in ops} == {(gen.e2m1, gen.e2m1)}
    assert {op.output_type for op in ops} == {gen.DataType.f16, gen.DataType.bf16}
    assert {op.swap_ab for op in ops} == {True, False}
    assert {op.epi_fusion for op in ops} == {gen.TrtLlm_EpilogueFusion.epilogue_fusion_none,
                                             gen.TrtLlm_EpilogueFusion.epilogue_fusion_finalize}
    # what the module generator writes for the SM120 module holds them
    out = tmp_path / "gen"
    gen.generate_gemm_operations(out, "120;120-real")
    texts = [p.read_text() for p in out.rglob("*.generated.cu")]
    assert sum(t.count("128, 32, 64, 1, 1, 1") for t in texts) == 8


@pytest.mark.slow
@pytest.mark.xdist_group("cutlass-compile")
def test_one_instantiation_compiles_for_sm120a(moe_tree, cuda_tools, cublaslt_include, tmp_path):
    tree, _ = moe_tree
    gen = _generator(tree, "fi_gen_patched_compile")
    assert (tree / NV / MOE_INL).is_file()
    # the decode path's variant: finalize fusion (the MoE's second GEMM), swap_ab, bf16 output
    op = next(op for op in _tile_ops(gen) if op.swap_ab and op.output_type == gen.DataType.bf16
              and op.epi_fusion == gen.TrtLlm_EpilogueFusion.epilogue_fusion_finalize)
    source = tmp_path / "moe_tile.cu"
    source.write_text(gen.get_file_content([MOE_INL], [op]))
    obj = tmp_path / "moe_tile.o"
    proc = _nvcc(cuda_tools, cublaslt_include, tree, source, obj)
    assert proc.returncode == 0, proc.stderr[-4000:]
    cuobjdump = cuda_tools[1]
    listing = subprocess.run([str(cuobjdump), "--list-elf", str(obj)], capture_output=True, text=True)
    assert listing.returncode == 0, listing.stderr
    assert list_elf_arches(listing.stdout) == {"sm_120a"}, listing.stdout
    usage = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(obj)], capture_output=True, text=True)
    kernels = [ln for ln in usage.stdout.splitlines() if "Function" in ln and "GemmUniversal" in ln]
    # one grouped block-scaled SM120 kernel whose CTA tile is 128x32x64 (mangled cute::C<128>, C<32>, C<64>)
    assert len(kernels) == 1, usage.stdout[-2000:]
    assert "ILi128EEENSC_ILi32EEENSC_ILi64EEE" in kernels[0] and "BlockScaled" in kernels[0]
    stages = int(re.search(r"MainloopSm120ArrayTmaWarpSpecializedBlockScaledILi(\d+)E", kernels[0]).group(1))
    assert stages == 13  # CUTLASS's carveout: 128x32x128 gets 6 in the same shared memory


_GATE = """// Compile-time checks of the patched SM120 MoE dispatch gate and tile enum (no kernel instantiated).
#include "tensorrt_llm/kernels/cutlass_kernels/moe_gemm/moe_gemm_template_dispatch_tma_ws.h"
namespace oss = tensorrt_llm::kernels::cutlass_kernels_oss;
using Tile = cute::Shape<cute::_128, cute::_32, cute::_64>;
using One = cute::Shape<cute::_1, cute::_1, cute::_1>;
static_assert(oss::are_tile_shapes_supported_sm120<Tile, One, __nv_fp4_e2m1>(), "NVFP4 activations dispatch it");
static_assert(!oss::are_tile_shapes_supported_sm120<Tile, One, __nv_fp8_e4m3>(), "FP8 activations must not");
static_assert(oss::are_tile_shapes_supported_sm120<cute::Shape<cute::_128, cute::_32, cute::_128>, One, __nv_fp8_e4m3>(),
              "the FP8 x FP4 tiles keep dispatching");
static_assert((int)tensorrt_llm::cutlass_extensions::CutlassTileConfigSM120::CtaShape128x32x32B == 128032032, "K in bytes");
"""


@pytest.mark.slow
@pytest.mark.xdist_group("cutlass-compile")
def test_dispatch_gate_takes_the_tile_for_fp4_activations_only(moe_tree, cuda_tools, cublaslt_include, tmp_path):
    tree, _ = moe_tree
    source = tmp_path / "gate.cu"
    source.write_text(_GATE)
    proc = _nvcc(cuda_tools, cublaslt_include, tree, source, tmp_path / "gate.o")
    assert proc.returncode == 0, proc.stderr[-4000:]


_CANDIDATES = """// The SM120 candidate tiles FlashInfer's MoE autotuner is offered, one line per query.
#include <cstdio>
#include "tensorrt_llm/kernels/cutlass_kernels/cutlass_heuristic.h"
using tensorrt_llm::cutlass_extensions::CutlassGemmConfig;
static void show(char const* what, int param) {
  auto configs = tensorrt_llm::kernels::cutlass_kernels::get_candidate_configs(
      120, 1, (CutlassGemmConfig::CandidateConfigTypeParam)param);
  std::printf("%s", what);
  for (auto const& c : configs) std::printf(" %s", c.getTileConfigAsName().c_str());
  std::printf("\\n");
}
int main() {
  int const fp4 = CutlassGemmConfig::BLACKWELL | CutlassGemmConfig::FP4_ONLY;
  show("grouped_fp4", fp4 | CutlassGemmConfig::GROUPED_GEMM);
  show("grouped_fp8_fp4", fp4 | CutlassGemmConfig::GROUPED_GEMM | CutlassGemmConfig::FP8FP4_MIXED);
  show("dense_fp4", fp4);
  return 0;
}
"""


@pytest.mark.slow
@pytest.mark.xdist_group("cutlass-compile")
def test_autotuner_candidates_offer_the_tile_to_grouped_fp4_only(moe_tree, cuda_tools, cublaslt_include, tmp_path):
    """The patched cutlass_heuristic.cpp compiled (host code) and run here: what get_candidate_configs
    returns for SM120 is the list of tactics the MoE runner's autotuner measures."""
    tree, _ = moe_tree
    nvcc = cuda_tools[0]
    nv = tree / NV
    main_cpp = tmp_path / "candidates.cpp"
    main_cpp.write_text(_CANDIDATES)
    exe = tmp_path / "candidates"
    sources = [main_cpp, nv / "tensorrt_llm/kernels/cutlass_kernels/cutlass_heuristic.cpp",
               *(nv / "cpp/common" / f for f in ("tllmException.cpp", "stringUtils.cpp", "logger.cpp"))]
    cmd = [str(nvcc), "-std=c++17", "-x", "cu", "-DENABLE_BF16", "-DENABLE_FP8", "-DENABLE_FP4",
           *(f"-I{d}" for d in (nv, nv / "include", nv / "tensorrt_llm/cutlass_extensions/include",
                                tree / "3rdparty/cutlass/include", tree / "include")),
           *cuda_tools[2], *cublaslt_include, *map(str, sources), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    got = {line.split()[0]: line.split()[1:] for line in run.stdout.splitlines()}
    assert got["grouped_fp4"][-1] == "128x32x32"  # appended: the existing tactics keep their indices
    assert got["grouped_fp4"].count("128x32x32") == 1
    assert "128x32x32" not in got["grouped_fp8_fp4"] and "128x32x32" not in got["dense_fp4"]
    assert "128x32x64" in got["grouped_fp4"]  # the tiles 0.7.2 had are all still offered


_GEN_MODULE = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from flashinfer.jit import fused_moe
spec = fused_moe.gen_cutlass_fused_moe_sm120_module()
texts = [open(s).read() for s in spec.sources if str(s).endswith(".generated.cu")]
print(json.dumps({"name": spec.name, "tile_instances": sum(t.count("128, 32, 64, 1, 1, 1") for t in texts)}))
"""


@pytest.mark.slow
@pytest.mark.xdist_group("cutlass-compile")
def test_the_recipes_env_logs_the_evidence_when_it_makes_the_moe_module(tmp_path):
    """What the live server runs: the recipe's env (its patched FlashInfer installed) builds the SM120
    MoE module's JIT spec as sglang's flashinfer_cutlass runner does on first use, generating the
    instantiations, and logs the line the recipe's [evidence] waits for. No GPU: the arch is given."""
    from toolkit.recipe.load import load_recipe
    from toolkit.run.pipeline import prepare

    recipe = load_recipe("moe-tiles")
    home = TEST_CACHE
    p = prepare(recipe, home, until="build")
    env = {**p.env.run_environ(), "CUDA_VISIBLE_DEVICES": "", "FLASHINFER_CUDA_ARCH_LIST": "12.0a",
           "FLASHINFER_WORKSPACE_BASE": str(tmp_path)}
    proc = subprocess.run([str(p.env.python), "-c", _GEN_MODULE], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out == {"name": "fused_moe_120", "tile_instances": 8}
    (spec,) = recipe.evidence.values()
    assert spec.log and any(re.search(spec.log, line) for line in proc.stderr.splitlines()), proc.stderr[-2000:]
