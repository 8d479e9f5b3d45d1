"""patches/flashinfer/sm120-fp4-tiles.patch and toolkit.envs.steps.flashinfer_sources.

Fast tests run on a small synthetic FlashInfer-shaped tree. The slow test takes the real
flashinfer-python 0.7.2 sdist from PyPI (cached under $PATCHBENCH_TEST_CACHE or
~/.cache/patchbench-test, downloaded once for concurrent test processes), applies the patch with
git (zero fuzz), renders the new tile's CUTLASS instantiation from the sdist's own template,
compiles it for sm_120a with nvcc and checks with cuobjdump that the object holds an sm_120a ELF. It needs nvcc (skips without), ~3 min and ~7 GB.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import git_run
from flashinfer_sdist import cuda_tools, described_files, flashinfer_sdist, list_elf_arches, unpack_subset  # noqa: F401 (fixtures)
from toolkit.envs.steps import flashinfer_sources as fk
from toolkit.errors import BadInput

REPO_ROOT = Path(__file__).resolve().parent.parent
PATCH = REPO_ROOT / "patches" / "flashinfer" / "sm120-fp4-tiles.patch"
NEW_TILE = (128, 32, 64)

# --- fast: a synthetic tree --------------------------------------------------------------------

_FAKE_GENERATOR = '''
def gen_gemm_sm120_module_cutlass_fp4():
    with open("t") as f:
        dtype_list = ["__nv_bfloat16", "half"]
        cta_m_n_k_list = [
            (128, 32, 128),
            (128, 64, 128),
        ]
    return gen_jit_spec(
        "fp4_gemm_cutlass_sm120",
        [],
        extra_cuda_cflags=nvcc_flags + ["-DENABLE_BF16", "-DENABLE_FP4"],
        extra_cflags=["-DFAST_BUILD"],
    )
'''
_FAKE_TEMPLATE = "// inst\nLAUNCHER({{ type }}, {{ cta_m }}, {{cta_n}}, {{ cta_k }}, true)\n"


@pytest.fixture
def fake_tree(tmp_path) -> Path:
    t = tmp_path / "fi"
    (t / "flashinfer" / "jit" / "gemm").mkdir(parents=True)
    (t / "flashinfer" / "jit" / "gemm" / "core.py").write_text(textwrap.dedent(_FAKE_GENERATOR))
    (t / "csrc").mkdir()
    (t / "csrc" / fk.FP4_SM120_TEMPLATE).write_text(_FAKE_TEMPLATE)
    (t / "include" / "flashinfer").mkdir(parents=True)
    (t / "3rdparty" / "cutlass" / "include" / "cutlass").mkdir(parents=True)
    (t / "3rdparty" / "cccl" / "cub").mkdir(parents=True)
    return t


def test_tiles_dtypes_and_module_flags_come_from_the_tree(fake_tree):
    assert fk.sm120_fp4_tiles(fake_tree) == [(128, 32, 128), (128, 64, 128)]
    assert fk.sm120_fp4_dtypes(fake_tree) == ["__nv_bfloat16", "half"]
    assert fk.sm120_fp4_module_flags(fake_tree) == ["-DENABLE_BF16", "-DENABLE_FP4"]


def test_render_writes_the_jit_file_name_and_text(fake_tree, tmp_path):
    out = fk.render_sm120_fp4_tile_source(fake_tree, 128, 64, 128, tmp_path / "gen")
    assert out.name == "fp4_gemm_cutlass___nv_bfloat16_128_64_128.cu"
    # jinja2 drops one trailing newline by default; the renderer matches it
    assert out.read_text() == "// inst\nLAUNCHER(__nv_bfloat16, 128, 64, 128, true)"
    mtime = out.stat().st_mtime_ns
    fk.render_sm120_fp4_tile_source(fake_tree, 128, 64, 128, tmp_path / "gen")
    assert out.stat().st_mtime_ns == mtime  # unchanged content: file left alone


def test_render_refuses_a_tile_the_tree_does_not_build(fake_tree, tmp_path):
    with pytest.raises(BadInput, match="not in gen_gemm_sm120_module_cutlass_fp4"):
        fk.render_sm120_fp4_tile_source(fake_tree, *NEW_TILE, tmp_path)
    out = fk.render_sm120_fp4_tile_source(fake_tree, *NEW_TILE, tmp_path, require_listed=False)
    assert "128, 32, 64" in out.read_text()
    with pytest.raises(BadInput, match="dtype"):
        fk.render_sm120_fp4_tile_source(fake_tree, 128, 32, 128, tmp_path, dtype="float")


@pytest.mark.parametrize("arch,gencode", [
    ("12.0a", "-gencode=arch=compute_120a,code=sm_120a"),
    ("120f", "-gencode=arch=compute_120f,code=sm_120f"),
    ("sm_120a", "-gencode=arch=compute_120a,code=sm_120a"),
    ("8.0", "-gencode=arch=compute_80,code=sm_80"),
])
def test_nvcc_flags(fake_tree, arch, gencode):
    flags = fk.nvcc_flags_for_flashinfer(fake_tree, arch, module_flags=["-DX"])
    assert flags[0] == "-std=c++17"
    assert gencode in flags and flags.index(gencode) < flags.index("-DX")
    assert "--expt-relaxed-constexpr" in flags and "-DNDEBUG" in flags
    assert f"-I{(fake_tree / '3rdparty/cccl/cub').resolve()}" in flags
    cutlass = str((fake_tree / "3rdparty/cutlass/include").resolve())
    assert flags[flags.index(cutlass) - 1] == "-isystem"
    # directories the tree lacks are not passed
    assert not any("spdlog" in f for f in flags)


@pytest.mark.parametrize("arch", ["12.0", "sm120", "hopper", "12.0x"])
def test_bad_arch(fake_tree, arch):
    with pytest.raises(BadInput):
        fk.nvcc_flags_for_flashinfer(fake_tree, arch)


def test_not_a_flashinfer_tree(tmp_path):
    with pytest.raises(BadInput, match="not a FlashInfer source tree"):
        fk.nvcc_flags_for_flashinfer(tmp_path, "12.0a")


def test_patch_header_and_layout():
    assert described_files(PATCH) == {"flashinfer/jit/gemm/core.py", "include/flashinfer/gemm/cutlass_gemm_configs.h",
                     "include/flashinfer/gemm/fp4_gemm_cutlass_template_sm120.h"}


# --- slow: the real sdist, nvcc and cuobjdump --------------------------------------------------


def test_list_elf_arches():
    assert list_elf_arches("ELF file    1: tile.1.sm_120a.cubin\n") == {"sm_120a"}
    assert list_elf_arches("nothing here") == set()


@pytest.mark.slow
@pytest.mark.xdist_group("cutlass-compile")  # one CUTLASS compile at a time (~7 GB each)
def test_new_tile_compiles_for_sm120a(flashinfer_sdist, cuda_tools, tmp_path):
    nvcc, cuobjdump, extra = cuda_tools
    tree = tmp_path / "flashinfer"
    tree.mkdir()
    unpack_subset(flashinfer_sdist, tree)
    assert git_run(tree, "init", "-q").returncode == 0
    git_run(tree, "add", "-A", "-f")
    assert git_run(tree, "commit", "-q", "-m", "flashinfer-python 0.7.2 sdist (subset)").returncode == 0

    # the unpatched tree does not build the tile
    assert NEW_TILE not in fk.sm120_fp4_tiles(tree)
    with pytest.raises(BadInput):
        fk.render_sm120_fp4_tile_source(tree, *NEW_TILE, tmp_path / "gen")

    check = git_run(tree, "apply", "--check", "-v", str(PATCH))  # no -C, no whitespace fixes: zero fuzz
    assert check.returncode == 0, check.stderr
    assert git_run(tree, "apply", str(PATCH)).returncode == 0
    assert NEW_TILE in fk.sm120_fp4_tiles(tree)
    text = (tree / "include/flashinfer/gemm/fp4_gemm_cutlass_template_sm120.h").read_text()
    assert "CtaShape128x32x32B:\n      DISPATCH_WITH_SCHEDULER(128, 32, 64);" in text

    source = fk.render_sm120_fp4_tile_source(tree, *NEW_TILE, tmp_path / "gen")
    assert "INSTANTIATE_FP4_GEMM_KERNEL_LAUNCHER(__nv_bfloat16, 128, 32, 64, 1, 1, 1, _1SM, true)" \
        in source.read_text()
    obj = tmp_path / "tile.o"
    cmd = fk.sm120_fp4_nvcc_command(tree, source, obj, arch="12.0a", nvcc=str(nvcc), extra=extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=2000)
    assert proc.returncode == 0, proc.stderr[-4000:]

    listing = subprocess.run([str(cuobjdump), "--list-elf", str(obj)], capture_output=True, text=True)
    assert listing.returncode == 0, listing.stderr
    assert list_elf_arches(listing.stdout) == {"sm_120a"}, listing.stdout
