"""sgl-kernel's wheel through its CMake build (scikit-build-core): the -D toggles that select the
recipe's arches, pre-seeded FetchContent sources, the shared compiler cache."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Mapping, Sequence

from toolkit.envs.steps.arch import parse_arch, torch_arch_list
from toolkit.envs.steps.context import scrubbed_environ
from toolkit.recipe.spec import BuildSpec


def sgl_kernel_build_command(
    project_dir: Path,
    spec: BuildSpec,
    *,
    python: Path,
    out_dir: Path,
    uv: str,
    uv_cache: Path,
    ccache_dir: Path | None,
    fetchcontent: Mapping[str, Path] | None = None,
    cuda_home: str | None = None,
    base_environ: Mapping[str, str] | None = None,
    index_args: Sequence[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """argv and environment that build sgl-kernel's wheel for the recipe's arches.

    sgl-kernel's CMakeLists.txt hard-codes its -gencode list per CUDA version and offers toggles:
    ENABLE_BELOW_SM90 (sm_75/80/89), SGL_KERNEL_ENABLE_SM90A, SGL_KERNEL_ENABLE_SM100A (the
    sm_100a/120a block), SGL_KERNEL_ENABLE_FP4, SGL_KERNEL_COMPILE_THREADS, and ENABLE_CCACHE
    (used only when CCACHE_DIR is set). FetchContent sources are pre-seeded with
    FETCHCONTENT_SOURCE_DIR_<NAME> (the declared name upper-cased, e.g. REPO-CUTLASS) and
    FETCHCONTENT_FULLY_DISCONNECTED=ON, so an offline build never downloads. The build runs
    against the env's torch (--no-build-isolation); verification then checks every declared arch
    is in the result, since the CMake file, not the recipe, picks the gencodes.
    """
    arches = [parse_arch(a) for a in spec.arch]
    majors = {m for m, _, _ in arches}
    defines: dict[str, str] = {
        "ENABLE_BELOW_SM90": "ON" if any(m < 9 for m in majors) or not arches else "OFF",
        "SGL_KERNEL_ENABLE_SM90A": "ON" if any(m == 9 and s == "a" for m, _, s in arches) else "OFF",
        "SGL_KERNEL_ENABLE_SM100A": "ON" if any(m >= 10 for m in majors) else "OFF",
        "SGL_KERNEL_ENABLE_FP4": "ON" if any(m >= 10 for m in majors) else "OFF",
        "ENABLE_CCACHE": "ON" if ccache_dir and shutil.which("ccache") else "OFF",
    }
    if spec.jobs:
        defines["SGL_KERNEL_COMPILE_THREADS"] = str(spec.jobs)
    for name, path in sorted((fetchcontent or {}).items()):
        defines[f"FETCHCONTENT_SOURCE_DIR_{name.upper()}"] = str(Path(path).resolve())
    if fetchcontent:
        defines["FETCHCONTENT_FULLY_DISCONNECTED"] = "ON"
    argv = [uv, "build", "--wheel", "--no-config", "--cache-dir", str(uv_cache),
            "--no-build-isolation", "--python", str(python), "--out-dir", str(out_dir),
            *index_args]
    for k, v in defines.items():
        argv.append(f"--config-setting=cmake.define.{k}={v}")
    argv.append(f"--config-setting=build-dir={out_dir.parent / 'sgl-kernel-cmake'}")
    argv.append(str(project_dir))

    env = scrubbed_environ(os.environ) if base_environ is None else dict(base_environ)
    if spec.arch:
        env["TORCH_CUDA_ARCH_LIST"] = torch_arch_list(spec.arch)
    if spec.jobs:
        env["MAX_JOBS"] = str(spec.jobs)
        env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(spec.jobs)
    if cuda_home:
        env["CUDA_HOME"] = cuda_home
        env["CUDACXX"] = str(Path(cuda_home) / "bin" / "nvcc")
    if defines["ENABLE_CCACHE"] == "ON" and ccache_dir:
        env["CCACHE_DIR"] = str(ccache_dir)
        env["CCACHE_BASEDIR"] = str(Path(project_dir).resolve())
        env["CCACHE_NOHASHDIR"] = "1"
    env.update(dict(spec.env))
    return argv, env
