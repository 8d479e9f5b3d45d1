"""Content-addressed, isolated Python environments: identity, creation, atomic publish, list, gc.

An env's key is the sha256 of a canonical JSON document (`key_inputs`) holding everything that can
change what runs in it: each source's tree hash, the build settings (`BuildSpec`), the Python
version, the dependency set (extra packages plus the pip/uv sources they resolve from) and the
toolchain (nvcc; in overlay mode the base interpreter's torch/CUDA and its package set). Same key:
the env is reused with zero work. Any difference: a new env. Never stale.

    identity   settings check, key inputs, env key
    manifest   the Env value, manifest read/write, per-key lock, find_env, run variables
    lifecycle  ensure_env: reuse, or build (steps from `toolkit.envs.steps`) and publish atomically
    kernels    FlashInfer modules added to a published env (or just some of their units)
    gc         list, disk usage, gc

On-disk layout under `home` (PATCHBENCH_HOME):

    envs/<key[:16]>/              a published env (complete: the rename is the publish)
        bin/python ...            a relocatable uv venv
        kernels/<source>/...      nvcc objects of the recipe's `cuda` globs
        jit/                      every run-time JIT cache (FlashInfer, SGLANG_CACHE_DIR: Triton,
                                  Inductor, CUDA PTX, TileLang), private to this env
        logs/<step>.log           one log per build step
        patchbench-env.json       the manifest, written last
    envs/.tmp-<key16>-<pid>/      a build in progress (or killed): never used, removed later
    envs/.failed-<key16>-<pid>/   the logs of a failed build
    envs/.locks/<key16>.lock      one lock per key: concurrent builds of one key wait, then reuse
    toolchain/                    cuobjdump, cuBLAS/cuRAND headers, libcuda stub, nvcc launcher
    ccache/                       CCACHE_DIR shared by every env and recipe

The build itself (installs, nvcc, FlashInfer JIT, verification) lives in `toolkit.envs.steps`, one
step per module, which never imports the rest of this package.

Stage 3, tree -> env. May import: toolkit.tree, toolkit.recipe and the shared modules.
"""


from toolkit.envs.steps.pipconf import PipSources, pip_sources
from toolkit.envs.steps.probe import Toolchain, find_nvcc, probe_python, probe_toolchain, uv_bin
from toolkit.envs.gc import EnvInfo, GcResult, disk_usage, gc_envs, list_envs, unique_usage
from toolkit.envs.identity import KEY_LEN, SCHEMA, env_key, key_inputs, validate_spec
from toolkit.envs.kernels import build_kernel_units, build_kernels
from toolkit.envs.lifecycle import ensure_env, uv_cache_dir
from toolkit.envs.manifest import (MANIFEST, Env, find_env, key_lock, read_manifest, run_vars,
                                   write_manifest)
from toolkit.recipe.spec import BuildSpec

__all__ = [
    "KEY_LEN", "MANIFEST", "SCHEMA", "BuildSpec", "Env", "EnvInfo", "GcResult", "PipSources",
    "Toolchain", "build_kernel_units", "build_kernels", "disk_usage", "env_key", "ensure_env", "find_env", "find_nvcc",
    "gc_envs", "key_inputs", "key_lock", "list_envs", "pip_sources", "probe_python",
    "probe_toolchain", "read_manifest", "run_vars", "unique_usage", "uv_bin", "uv_cache_dir",
    "validate_spec", "write_manifest",
]
