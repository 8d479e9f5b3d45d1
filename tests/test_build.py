"""Builds: nvcc arch flags, cuobjdump verification, shared ccache across tree paths, wheel
re-packing, the toolchain dir (stub, launcher), sgl-kernel's CMake arguments, and (slow) the real
flashinfer-python 0.7.2 sdist installed from its git tree with one JIT module compiled for 12.0a.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from rich.console import Console

from conftest import TEST_CACHE, Upstream, base_torch_python, git, pypi_download
from toolkit.envs import steps as build
from toolkit import envs
from toolkit.envs.steps import (
    cuda_binary_arches,
    ensure_tools,
    flashinfer_environ,
    gencode_flags,
    parse_arch,
    repack_wheel,
    sgl_kernel_build_command,
    verify_arches,
)
from toolkit.envs import BuildSpec, PipSources, ensure_env, list_envs, pip_sources
from toolkit.build_once import build_once
from toolkit.errors import BadInput, PatchbenchError
from toolkit.tree.applied import AppliedTree

NVCC = envs.find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs nvcc")
needs_ccache = pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache")


def tree_of(root: Path, source: str = "mini", layout: str = "git", package_dir: str = "") -> AppliedTree:
    return AppliedTree.at_head(source, root, layout=layout, package_dir=package_dir)


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


@pytest.fixture
def pb_home(tmp_path) -> Path:
    h = tmp_path / "pbhome"
    h.mkdir()
    return h


@pytest.fixture
def norm_home(pb_home) -> Path:
    """A PATCHBENCH_HOME whose compiler cache is shared by the tests that compile FlashInfer's norm
    module for sm_120a (one xdist group, so they run one after the other): the second gets ccache
    hits, as a second env of a real campaign does, instead of minutes of nvcc."""
    shared = TEST_CACHE / "ccache-flashinfer-norm"
    shared.mkdir(parents=True, exist_ok=True)
    (pb_home / "ccache").symlink_to(shared, target_is_directory=True)
    return pb_home


def nvcc_object(tmp_path: Path, arches, name="k") -> Path:
    src = tmp_path / f"{name}.cu"
    src.write_text("__global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n")
    out = tmp_path / f"{name}.o"
    subprocess.run([str(NVCC), *gencode_flags(arches), "-c", str(src), "-o", str(out)], check=True)
    return out


def cuobjdump(home: Path) -> Path:
    return ensure_tools(home, ["cuobjdump"], cuda_home=str(NVCC.parent.parent), nvcc_version=None,
                        uv=envs.uv_bin(), uv_cache=envs.uv_cache_dir(home), sources=pip_sources(),
                        console=quiet()).cuobjdump


# --------------------------------------------------------------------------------------------
# arch flags (pure)
# --------------------------------------------------------------------------------------------


def test_arch_flags():
    assert parse_arch("12.0a") == (12, 0, "a") and parse_arch("8.9") == (8, 9, "")
    assert gencode_flags(["12.0a", "12.0f", "9.0a", "8.9"]) == [
        "-gencode=arch=compute_120a,code=sm_120a",
        "-gencode=arch=compute_120f,code=sm_120f",
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_89,code=sm_89",
    ]
    assert build.sm_name("10.0a") == "sm_100a"
    assert build.flashinfer_arch_list(["12.0a", "9.0a"]) == "12.0a 9.0a"
    # arch-120f: FlashInfer takes the family arch; torch's cpp_extension knows none ("Unknown CUDA arch (12.0f)")
    assert build.flashinfer_arch_list(["12.0f"]) == "12.0f" and build.torch_arch_list(["12.0f"]) == "12.0a"
    assert build.torch_arch_list(["12.0f", "12.0a", "9.0a"]) == "12.0a;9.0a"
    for bad in ("sm_120a", "12", "12.0x", "twelve"):
        with pytest.raises(BadInput):
            parse_arch(bad)


# --------------------------------------------------------------------------------------------
# cuobjdump verification
# --------------------------------------------------------------------------------------------


@needs_nvcc
def test_cuobjdump_tells_120a_from_120f(tmp_path, pb_home):
    tool = cuobjdump(pb_home)
    obj_a = nvcc_object(tmp_path, ["12.0a"], "a")
    obj_f = nvcc_object(tmp_path, ["12.0f"], "f")
    obj_multi = nvcc_object(tmp_path, ["12.0a", "12.0f", "9.0a"], "m")
    lines, arches = cuda_binary_arches(obj_a, tool)
    assert arches == {"sm_120a"} and lines == ["ELF file    1: a.1.sm_120a.cubin"]
    lines, arches = cuda_binary_arches(obj_f, tool)
    assert lines == ["ELF file    1: f.1.sm_120.cubin"]  # --list-elf: a family cubin looks plain
    assert arches == {"sm_120f"}  # the fatbin header says what it is
    assert cuda_binary_arches(obj_multi, tool)[1] == {"sm_120a", "sm_120f", "sm_90a"}

    assert verify_arches([obj_a], ["12.0a"], cuobjdump=tool) == []
    assert verify_arches([obj_multi], ["12.0a", "12.0f", "9.0a"], cuobjdump=tool) == []
    (problem,) = verify_arches([obj_a, obj_f], ["12.0f"], cuobjdump=tool)
    assert str(obj_a) in problem and "12.0f" in problem and "holds sm_120a" in problem
    (problem,) = verify_arches([obj_f], ["12.0"], cuobjdump=tool)  # plain 120 is not 120f
    assert "no code for 12.0 (sm_120)" in problem
    host = tmp_path / "host.o"
    (tmp_path / "host.c").write_text("int x;\n")
    subprocess.run(["cc", "-c", str(tmp_path / "host.c"), "-o", str(host)], check=True)
    (problem,) = verify_arches([host], ["12.0a"], cuobjdump=tool)
    assert "holds no device code" in problem


@needs_nvcc
def test_cuda_globs_compiled_for_sm_120a_and_checked(tmp_path, pb_home):
    up = Upstream(tmp_path / "up").root
    spec = BuildSpec(arch=("12.0a",), cuda=(("mini", ("csrc/*.cu",)),), jobs=2)
    env = ensure_env([tree_of(up)], spec, pb_home, console=quiet())
    objs = sorted((env.path / "kernels" / "mini" / "csrc").iterdir())
    assert [o.name for o in objs] == ["a.o", "b.o"]
    v = env.manifest["verification"]
    assert v["kernels/mini/csrc/a.o"] == {"arches": ["sm_120a"],
                                         "elf": ["ELF file    1: a.1.sm_120a.cubin"]}
    assert env.manifest["cuda"]["flags"] == ["-gencode=arch=compute_120a,code=sm_120a"]
    assert "sm_120a" in (env.path / "logs" / "verify.log").read_text()
    assert env.manifest["toolchain"]["tools"]["cuobjdump"]


@needs_nvcc
def test_declared_arch_no_binary_carries_fails_clearly(tmp_path, pb_home, monkeypatch):
    up = Upstream(tmp_path / "up").root
    real = build.gencode_flags
    monkeypatch.setattr(build.cuda, "gencode_flags", lambda arches: real(list(arches)[:1]))  # drops 9.0a
    spec = BuildSpec(arch=("12.0a", "9.0a"), cuda=(("mini", ("csrc/a.cu",)),))
    with pytest.raises(PatchbenchError) as info:
        ensure_env([tree_of(up)], spec, pb_home, recipe="arch", console=quiet())
    err = info.value
    assert err.step == "verify"
    assert "kernels/mini/csrc/a.o" in err.message
    assert "no code for 9.0a (sm_90a); it holds sm_120a" in err.message
    assert Path(err.log).name == "verify.log" and Path(err.log).is_file()
    assert list_envs(pb_home) == []


@needs_nvcc
def test_ptx_for_a_declared_arch_is_not_sass_for_it(tmp_path, pb_home, monkeypatch):
    """An sm_120f cubin beside compute_120a PTX: cuobjdump lists the cubin as plain sm_120 and its
    -res-usage headers say sm_120f (ELF) and sm_120a (PTX); only the ELF header names SASS, so a build
    declaring 12.0a and 12.0f fails at verify instead of passing on the PTX."""
    up = Upstream(tmp_path / "up").root
    real = build.gencode_flags
    monkeypatch.setattr(build.cuda, "gencode_flags", lambda arches: real(["12.0f"]))  # no sm_120a cubin
    spec = BuildSpec(arch=("12.0a", "12.0f"), cuda=(("mini", ("csrc/a.cu",)),),
                     nvcc_flags=("-gencode=arch=compute_120a,code=compute_120a",))
    with pytest.raises(PatchbenchError) as info:
        ensure_env([tree_of(up)], spec, pb_home, recipe="ptx", console=quiet())
    assert info.value.step == "verify"
    assert "kernels/mini/csrc/a.o: no code for 12.0a (sm_120a); it holds sm_120f" in info.value.message
    tool = cuobjdump(pb_home)
    both = tmp_path / "both.o"
    (tmp_path / "both.cu").write_text("__global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n")
    subprocess.run([str(NVCC), "-gencode=arch=compute_120f,code=sm_120f",
                    "-gencode=arch=compute_120a,code=compute_120a", "-c", str(tmp_path / "both.cu"),
                    "-o", str(both)], check=True)
    lines, held = build.cuda.read_holds(both, tool)
    assert held.sass == {"sm_120f"} and held.ptx == {"sm_120a"}
    assert "PTX file    1: both.1.sm_120a.ptx" in lines


# --------------------------------------------------------------------------------------------
# ccache across envs and tree paths
# --------------------------------------------------------------------------------------------


@needs_nvcc
@needs_ccache
def test_ccache_hits_across_tree_paths_after_one_cu_changes(tmp_path, pb_home):
    up = Upstream(tmp_path / "up").root
    spec = BuildSpec(arch=("12.0a",), cuda=(("mini", ("csrc/*.cu",)),))
    env1 = ensure_env([tree_of(up)], spec, pb_home, console=quiet())
    assert env1.manifest["cuda"]["ccache"] == {"hits": 0, "misses": 2}
    # the patched tree lives elsewhere (another clone, another depth) and touches b.cu only
    other = tmp_path / "elsewhere" / "deeper" / "clone"
    other.parent.mkdir(parents=True)
    git(tmp_path, "clone", "-q", str(up), str(other))
    (other / "csrc" / "b.cu").write_text(
        "__global__ void b_kernel(float* x) { x[threadIdx.x] *= 3.0f; }\n")
    git(other, "commit", "-q", "-am", "patch b.cu")
    c = quiet()
    env2 = ensure_env([tree_of(other)], spec, pb_home, console=c)
    assert env2.key != env1.key
    assert env2.manifest["cuda"]["ccache"] == {"hits": 1, "misses": 1}
    assert "ccache: 1 hit(s), 1 miss(es)" in c.file.getvalue()


@needs_nvcc
@needs_ccache
def test_nvcc_launcher_makes_flashinfer_style_commands_cacheable(tmp_path, pb_home):
    tools = ensure_tools(pb_home, ["launcher"], cuda_home=str(NVCC.parent.parent), nvcc_version=None,
                         uv=envs.uv_bin(), uv_cache=envs.uv_cache_dir(pb_home),
                         sources=pip_sources(), console=quiet())
    assert tools.launcher and os.access(tools.launcher, os.X_OK)
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* x) { x[0] = 1.0f; }\n")
    cache = build.find_compiler_cache()
    env = {**os.environ, **cache.environ(pb_home, tmp_path)}
    for i in range(2):  # the exact shape of FlashInfer's ninja rule
        subprocess.run([str(tools.launcher), str(NVCC), "--generate-dependencies-with-compile",
                        "-MF", str(tmp_path / f"k{i}.o.d"), *gencode_flags(["12.0a"]), "-c",
                        str(src), "-o", str(tmp_path / f"k{i}.o")], check=True, env=env)
        assert (tmp_path / f"k{i}.o.d").read_text().count("k.cu") >= 1
    assert cache.stats(pb_home) == {"hits": 1, "misses": 1}


def test_every_home_of_a_test_run_shares_one_compiler_cache(home, run_ccache, tmp_path):
    """The `home` fixture's compiler cache is where patchbench puts a home's cache, and it is the test
    run's one (conftest.run_ccache): the miniature's CUDA files are compiled once per run, not by every
    test that builds an env. Counting tests (above) keep their own in `pb_home`."""
    env = build.CompilerCache("ccache", Path("/usr/bin/ccache"), None).environ(home, tmp_path)
    assert Path(env["CCACHE_DIR"]).resolve() == run_ccache.resolve()


@needs_nvcc
def test_every_home_of_a_test_run_shares_one_wheel_cache_and_toolchain(home, run_wheels, run_toolchain,
                                                                         upstream, tmp_path):
    """The `home` fixture's wheel cache and toolchain dir are the test run's (conftest.run_wheels,
    run_toolchain): a tree's wheel is built (`uv build`) once per run and installed from the cache by
    every other test's env of that tree, cuobjdump set up once (a miss and a hit here: the tree is
    this test's own). Tests that count builds keep their own home (`pb_home`)."""
    upstream.write("minipkg/__init__.py", f"VALUE = {tmp_path.name!r}\ndef hello():\n    print(VALUE)\n")
    upstream.commit()
    spec = BuildSpec(arch=("12.0a",), cuda=(("mini", ("csrc/*.cu",)),))  # cuobjdump checks the kernels
    first = ensure_env([upstream.tree()], spec, home, console=quiet())
    (wheel,) = first.manifest["installed"]
    assert wheel["cached"] is False
    assert [p.name for p in run_wheels.glob("*/*.whl")].count("minipkg-0.1.0-py3-none-any.whl") >= 1
    if first.manifest["toolchain"]["tools"]["cuobjdump"].startswith(str(home / "toolchain")):  # not the CUDA kit's
        assert list(run_toolchain.glob("py/nvidia/**/bin/cuobjdump"))
    other = tmp_path / "other-home"  # another test's home of the same run
    other.mkdir()
    for name, shared in (("ccache", home / "ccache"), ("wheels", run_wheels), ("toolchain", run_toolchain)):
        (other / name).symlink_to(shared, target_is_directory=True)
    second = ensure_env([upstream.tree()], spec, other, console=quiet())
    assert second.manifest["installed"][0]["cached"] is True
    assert second.manifest["installed"][0]["sha256"] == wheel["sha256"]


# --------------------------------------------------------------------------------------------
# toolchain dir, FlashInfer environment, sgl-kernel
# --------------------------------------------------------------------------------------------


@pytest.mark.skipif(build.has_libcuda(os.environ.get("CUDA_HOME", "/usr/local/cuda")),
                    reason="this machine has a libcuda.so: no stub is built")
def test_libcuda_stub_is_link_only_with_the_real_soname(pb_home):
    tools = ensure_tools(pb_home, ["stub"], cuda_home="/usr/local/cuda", nvcc_version=None,
                         uv=envs.uv_bin(), uv_cache=envs.uv_cache_dir(pb_home), sources=PipSources(),
                         console=quiet())
    stub = tools.libcuda_dir / "libcuda.so"
    dyn = subprocess.run(["readelf", "-d", str(stub)], capture_output=True, text=True).stdout
    assert "Library soname: [libcuda.so.1]" in dyn


def test_flashinfer_environ_without_a_gpu(tmp_path):
    tools = build.ToolDir(root=tmp_path, include_dirs=[tmp_path / "inc"], libcuda_dir=tmp_path / "stub",
                          launcher=tmp_path / "bin" / "nvcc-ccache")
    cache = build.CompilerCache("ccache", Path("/usr/bin/ccache"), None)
    env = flashinfer_environ({"FLASHINFER_EXTRA_CUDAFLAGS": "-DX=1"}, root=tmp_path / "env",
                             home=tmp_path, arches=["12.0a", "12.0f"], cuda_home="/usr/local/cuda",
                             tools=tools, cache=cache)
    assert env["FLASHINFER_WORKSPACE_BASE"] == str(tmp_path / "env" / "jit")
    assert env["FLASHINFER_CUDA_ARCH_LIST"] == "12.0a 12.0f"
    assert env["CUDA_HOME"] == "/usr/local/cuda"
    assert env["FLASHINFER_EXTRA_CUDAFLAGS"] == f"-DX=1 -isystem {tmp_path / 'inc'}"
    assert env["FLASHINFER_EXTRA_LDFLAGS"] == f"-L{tmp_path / 'stub'}"
    assert env["FLASHINFER_NVCC_LAUNCHER"] == str(tmp_path / "bin" / "nvcc-ccache")
    assert env["CCACHE_DIR"] == str(tmp_path / "ccache") and env["CCACHE_BASEDIR"] == str(tmp_path)
    assert env["CCACHE_NOHASHDIR"] == "1"


def test_sgl_kernel_cmake_arguments(tmp_path):
    spec = BuildSpec(arch=("12.0a", "9.0a"), jobs=6, env=(("SGL_X", "1"),))
    seeds = {"repo-cutlass": tmp_path / "cutlass", "repo-flashinfer": tmp_path / "fi"}
    argv, env = sgl_kernel_build_command(
        tmp_path / "sgl-kernel", spec, python=tmp_path / "env/bin/python", out_dir=tmp_path / "w",
        uv="uv", uv_cache=tmp_path / "uvc", ccache_dir=tmp_path / "ccache", fetchcontent=seeds,
        cuda_home="/usr/local/cuda", base_environ={"PATH": "/usr/bin"})
    assert argv[:3] == ["uv", "build", "--wheel"] and argv[-1] == str(tmp_path / "sgl-kernel")
    assert "--no-build-isolation" in argv
    assert argv[argv.index("--python") + 1] == str(tmp_path / "env/bin/python")
    defines = {a.split("cmake.define.", 1)[1].split("=", 1)[0]: a.rsplit("=", 1)[1]
               for a in argv if "cmake.define." in a}
    assert defines["ENABLE_BELOW_SM90"] == "OFF"
    assert defines["SGL_KERNEL_ENABLE_SM90A"] == "ON"
    assert defines["SGL_KERNEL_ENABLE_SM100A"] == "ON" and defines["SGL_KERNEL_ENABLE_FP4"] == "ON"
    assert defines["SGL_KERNEL_COMPILE_THREADS"] == "6"
    assert defines["FETCHCONTENT_SOURCE_DIR_REPO-CUTLASS"] == str((tmp_path / "cutlass").resolve())
    assert defines["FETCHCONTENT_SOURCE_DIR_REPO-FLASHINFER"] == str((tmp_path / "fi").resolve())
    assert defines["FETCHCONTENT_FULLY_DISCONNECTED"] == "ON"
    assert defines["ENABLE_CCACHE"] == ("ON" if shutil.which("ccache") else "OFF")
    assert env["MAX_JOBS"] == "6" and env["CMAKE_BUILD_PARALLEL_LEVEL"] == "6"
    assert env["TORCH_CUDA_ARCH_LIST"] == "12.0a;9.0a" and env["CUDA_HOME"] == "/usr/local/cuda"
    assert env["CUDACXX"] == "/usr/local/cuda/bin/nvcc" and env["SGL_X"] == "1"
    if shutil.which("ccache"):
        assert env["CCACHE_DIR"] == str(tmp_path / "ccache")
    # an sm_80-only recipe turns the old gencodes on and the Blackwell block off
    argv, _ = sgl_kernel_build_command(tmp_path, BuildSpec(arch=("8.0",)), python=Path("p"),
                                       out_dir=tmp_path / "w", uv="uv", uv_cache=tmp_path,
                                       ccache_dir=None)
    assert "--config-setting=cmake.define.ENABLE_BELOW_SM90=ON" in argv
    assert "--config-setting=cmake.define.SGL_KERNEL_ENABLE_SM100A=OFF" in argv
    assert not any("FETCHCONTENT" in a for a in argv)


# --------------------------------------------------------------------------------------------
# wheel layout
# --------------------------------------------------------------------------------------------


def test_wheel_tree_is_repacked_with_a_fresh_record_and_installed(tmp_path, pb_home):
    up = Upstream(tmp_path / "src").root
    subprocess.run([envs.uv_bin(), "build", "-q", "--no-config", "--wheel", "--out-dir",
                    str(tmp_path / "dist"), *pip_sources().uv_build_args(), str(up)], check=True)
    (whl,) = (tmp_path / "dist").glob("*.whl")
    wtree = tmp_path / "wheeltree"
    with zipfile.ZipFile(whl) as zf:
        zf.extractall(wtree)
    git(wtree, "init", "-q")
    git(wtree, "add", "-A")
    git(wtree, "commit", "-q", "-m", "wheel")
    (wtree / "minipkg" / "__init__.py").write_text("VALUE = 42  # patched\n")
    git(wtree, "commit", "-q", "-am", "patch")

    out = repack_wheel(wtree, tmp_path / "repacked")
    assert out.name == "minipkg-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(out) as zf:
        record = zf.read("minipkg-0.1.0.dist-info/RECORD").decode()
        data = zf.read("minipkg/__init__.py")
        names = zf.namelist()
    assert ".git/HEAD" not in names and names[-1].endswith("RECORD")
    rows = {r[0]: r for r in csv.reader(io.StringIO(record))}
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert rows["minipkg/__init__.py"][1:] == [f"sha256={digest}", str(len(data))]

    env = ensure_env([tree_of(wtree, layout="wheel")], BuildSpec(), pb_home, console=quiet())
    out = subprocess.run([str(env.python), "-c", "import minipkg; print(minipkg.VALUE)"],
                         capture_output=True, text=True)
    assert out.stdout.strip() == "42"
    assert env.manifest["installed"][0]["layout"] == "wheel"
    with pytest.raises(BadInput, match="not an unpacked wheel"):
        repack_wheel(up, tmp_path / "x")


# --------------------------------------------------------------------------------------------
# slow: the real FlashInfer 0.7.2 sdist, overlay over torch 2.13.0 CPU, `norm` for 12.0a
# --------------------------------------------------------------------------------------------

FI_VERSION = "0.7.2"
# what `import flashinfer.jit` needs besides torch (flashinfer's requirements.txt, minus the
# CUDA-only runtime stacks that a JIT compile does not import)
FI_IMPORT_PACKAGES = ("apache-tvm-ffi>=0.1.11,<0.2", "requests", "urllib3", "idna", "certifi",
                      "charset-normalizer", "click", "einops", "ninja", "tabulate", "tqdm",
                      "nvidia-ml-py", "numpy", "packaging")


def _flashinfer_git_tree() -> Path:
    """flashinfer-python 0.7.2's sdist, committed to git (what sources.py makes of a PyPI sdist);
    built once for concurrent test processes (toolkit.build_once)."""
    sdist = pypi_download(["--no-binary", "flashinfer-python", f"flashinfer-python=={FI_VERSION}"],
                          f"flashinfer_python-{FI_VERSION}.tar.gz")  # the sdist only: no cmake build

    def unpack(tmp: Path) -> None:
        import tarfile

        with tarfile.open(sdist) as tf:
            tf.extractall(tmp / "unpack", filter="data")
        (top,) = (tmp / "unpack").iterdir()
        for item in top.iterdir():
            os.rename(item, tmp / item.name)
        (tmp / "unpack" / top.name).rmdir()
        (tmp / "unpack").rmdir()
        git(tmp, "init", "-q")
        git(tmp, "add", "-A")
        git(tmp, "commit", "-q", "-m", f"flashinfer-python {FI_VERSION} sdist")

    return build_once(TEST_CACHE / f"flashinfer-{FI_VERSION}-git", unpack,
                      complete=lambda d: (d / ".git").is_dir() and git(d, "status", "--porcelain") == "")


def _flashinfer_overlay(base: Path, kernels: tuple = ()) -> tuple[AppliedTree, BuildSpec]:
    """The flashinfer sdist tree, overlaid on the base interpreter's torch, built for 12.0a."""
    tree = tree_of(_flashinfer_git_tree(), source="flashinfer", layout="sdist")
    spec = BuildSpec(mode="overlay", base_python=str(base), arch=("12.0a",), kernels=kernels,
                     packages=FI_IMPORT_PACKAGES, jobs=2,
                     env=(("BUILD_NVEP", "0"), ("FLASHINFER_BUILD_NO_PIP", "1")))
    return tree, spec


@pytest.mark.slow
@needs_nvcc
@pytest.mark.timeout(1500)
@pytest.mark.xdist_group("flashinfer-norm")
def test_flashinfer_sdist_tree_overlay_with_norm_compiled_for_12_0a(norm_home):
    pb_home = norm_home
    base = base_torch_python()
    tree, spec = _flashinfer_overlay(base, kernels=("norm",))
    c = quiet()
    env = ensure_env([tree], spec, pb_home, recipe="fi-norm", console=c)
    said = c.file.getvalue()
    assert "cuBLAS/cuRAND headers from PyPI" in said and "link-only libcuda.so stub" in said

    k = env.manifest["kernels"]["norm"]
    assert k["module"] == "norm" and k["generator"].endswith("gen_norm_module")
    aot = env.path / k["aot"]
    assert aot.is_file() and "flashinfer/data/aot/norm/norm.so" in k["aot"]
    assert k["jit"].startswith("jit/.cache/flashinfer/")
    v = env.manifest["verification"]
    assert v[k["aot"]]["arches"] == ["sm_120a"] and v[k["jit"]]["arches"] == ["sm_120a"]
    assert all(line.endswith("sm_120a.cubin") for line in v[k["aot"]]["elf"])
    tool = Path(env.manifest["toolchain"]["tools"]["cuobjdump"])
    assert build.verify_arches([aot], ["12.0a"], cuobjdump=tool) == []
    (problem,) = build.verify_arches([aot], ["12.0a", "12.0f"], cuobjdump=tool)
    assert "no code for 12.0f (sm_120f); it holds sm_120a" in problem

    probe = ("import flashinfer, torch; from flashinfer.jit import env as e; "
             "print(flashinfer.__file__); print(torch.__file__); print(e.get_aot_path('norm'))")
    out = subprocess.run([str(env.python), "-c", probe], capture_output=True, text=True,
                         env=env.run_environ())
    assert out.returncode == 0, out.stderr[-2000:]
    fi_file, torch_file, aot_path = out.stdout.strip().splitlines()[-3:]
    assert fi_file.startswith(str(env.path)) and torch_file.startswith(str(base.parent.parent))
    assert Path(aot_path) == aot  # FlashInfer itself resolves the AOT module patchbench installed
    assert ensure_env([tree], spec, pb_home, console=quiet()).reused


@pytest.mark.slow
@needs_nvcc
@pytest.mark.timeout(1500)
@pytest.mark.xdist_group("flashinfer-norm")
def test_only_the_matching_translation_units_of_a_module_are_compiled(norm_home):
    pb_home = norm_home
    tree, spec = _flashinfer_overlay(base_torch_python())
    env = ensure_env([tree], spec, pb_home, recipe="fi-only", console=quiet())
    built = envs.build_kernel_units(env, spec, ["norm"], "norm.cu", home=pb_home, console=quiet())
    (unit,) = built["norm"]["objects"]
    assert unit["source"].endswith("/norm.cu") and unit["object"].endswith("norm.cuda.o")
    assert unit["arches"] == ["sm_120a"] and (env.path / unit["object"]).is_file()
    assert built["norm"]["seconds"] >= 0  # timed (a compiler-cache hit can round to 0.0 s)
    assert not list(env.path.rglob("norm.so"))  # nothing linked, nothing installed
    assert "kernels" not in envs.find_env(pb_home, env.key).manifest or \
        "norm" not in envs.find_env(pb_home, env.key).manifest["kernels"]
    with pytest.raises(PatchbenchError, match="no source of module norm matches"):
        envs.build_kernel_units(env, spec, ["norm"], "*_999_*.cu", home=pb_home, console=quiet())


@needs_nvcc
def test_a_flashinfer_module_is_judged_as_flashinfer_builds_it(tmp_path, pb_home):
    """verify's rule for FlashInfer modules (cached_ops/ or aot/): code for some declared arch and
    none for another (an SM120-only module in a "12.0a 9.0a" build has no sm_90a), a module that fixes
    its own arch recorded, not judged; the recipe's own objects still need every declared arch."""
    tool = cuobjdump(pb_home)
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n")

    def built(rel: str, code: str) -> Path:
        out = tmp_path / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(NVCC), f"-gencode=arch=compute_{code[3:]},code={code}", "-c", str(src), "-o", str(out)],
                       check=True)
        return out

    ops = "jit/.cache/flashinfer/0.7.2/90a_120a/cached_ops"
    sm120_only = built(f"{ops}/gemm_sm120/gemm_sm120.so", "sm_120a")
    pinned = built(f"{ops}/fp4_quantization_sm120f/fp4_quantization_sm120f.so", "sm_120f")
    own = built("kernels/mini/csrc/a.o", "sm_120a")
    problems = build.cuda.verify_arches([sm120_only, pinned, own], ["12.0a", "9.0a"], cuobjdump=tool)
    assert problems == [f"{own}: no code for 9.0a (sm_90a); it holds sm_120a"], problems
    # a module builds every declared arch of a major it supports: 12.0f missing beside 12.0a is a problem
    (short,) = build.cuda.verify_arches([sm120_only], ["12.0a", "12.0f"], cuobjdump=tool)
    assert "no code for 12.0f (sm_120f); it holds sm_120a (FlashInfer module gemm_sm120" in short, short
    wrong = build.cuda.verify_arches([sm120_only], ["12.0f"], cuobjdump=tool)
    assert len(wrong) == 1 and "holds sm_120a, not in the recipe's build.arch 12.0f (FlashInfer module gemm_sm120)" in wrong[0]
