"""Builds inside an env, one step per module: installs from patched trees, nvcc through a shared
compiler cache, FlashInfer ahead-of-time JIT modules, sgl-kernel's CMake arguments, cuobjdump
arch checks.

    arch        arch strings -> sm names, -gencode flags, FlashInfer/torch arch lists (pure)
    steps       the named steps of a build: one log each, timings, the command runner
    pipconf     pip's configured package sources, handed to uv
    probe       the toolchain as probed now: interpreter, nvcc, uv
    ccache      the compiler cache shared by every env
    toolchain   tool setup under PATCHBENCH_HOME/toolchain (cuobjdump, headers, libcuda stub,
                nvcc launcher)
    context     BuildContext and the scrubbed build environment
    sgl_kernel  sgl-kernel's CMake build command
    python      venv, tree export, wheel build/repack, install, freeze
    wheel       an unpacked-wheel tree zipped back into a wheel (from a dir or git)
    wheel_cache built wheels keyed by what produced them, shared by every env
    cuda        nvcc over `cuda` globs; cuobjdump verification
    fatbin      what a binary holds (SASS, PTX per arch) from cuobjdump's text (pure)
    flashinfer  FlashInfer AOT check and ahead-of-time JIT modules
    flashinfer_sources  FlashInfer kernel sources and nvcc flags read from a tree (no import)

Every step runs argv lists (never a shell string), writes `<env>/logs/<step>.log`, and fails with a
PatchbenchError naming the step, the last lines of its log and the log's path. `toolkit.envs`
calls these steps in order; nothing here imports `toolkit.envs`.

Path independence of the compiler cache: every env and every tree lives at a different path, so
each nvcc call runs with `CCACHE_BASEDIR` set to the directory that holds its sources (the tree's
export for `cuda` globs; PATCHBENCH_HOME for FlashInfer's JIT, whose sources and build directory
sit at the same relative places in every env) and `CCACHE_NOHASHDIR=1`. ccache then rewrites the
absolute paths below the base directory into relative ones before hashing, so the same source
compiled with the same flags hits whatever directory it was exported to.
"""

from toolkit.envs.steps.arch import (flashinfer_arch_list, gencode_flags, parse_arch, sm_name,
                                torch_arch_list)
from toolkit.envs.steps.ccache import CompilerCache, find_compiler_cache
from toolkit.envs.steps.context import BuildContext, scrubbed_environ
from toolkit.envs.steps.cuda import (compile_cuda_sources, cuda_binary_arches, env_cuda_binaries,
                                verify_arches, verify_env)
from toolkit.envs.steps.flashinfer import (build_flashinfer_kernels, check_no_flashinfer_aot,
                                      flashinfer_environ, needs_flashinfer_check)
from toolkit.envs.steps.pipconf import PipSources, pip_sources
from toolkit.envs.steps.probe import Toolchain, find_nvcc, probe_python, probe_toolchain, uv_bin
from toolkit.envs.steps.python import (create_venv, export_tree, freeze, install_trees, project_name,
                                  select_trees)
from toolkit.envs.steps.sgl_kernel import sgl_kernel_build_command
from toolkit.envs.steps.steps import Steps
from toolkit.envs.steps.wheel import repack_tree, repack_wheel
from toolkit.envs.steps.toolchain import ToolDir, ensure_tools, find_cuobjdump, has_libcuda

__all__ = [
    "BuildContext", "CompilerCache", "PipSources", "Steps", "ToolDir", "Toolchain",
    "build_flashinfer_kernels", "check_no_flashinfer_aot", "compile_cuda_sources", "create_venv",
    "cuda_binary_arches", "ensure_tools", "env_cuda_binaries", "export_tree",
    "find_compiler_cache", "find_cuobjdump", "find_nvcc", "flashinfer_arch_list",
    "flashinfer_environ", "freeze", "gencode_flags", "has_libcuda", "install_trees",
    "needs_flashinfer_check", "parse_arch", "pip_sources", "probe_python", "probe_toolchain",
    "project_name", "repack_tree", "repack_wheel", "scrubbed_environ", "select_trees", "sgl_kernel_build_command",
    "sm_name", "torch_arch_list", "uv_bin", "verify_arches", "verify_env",
]
