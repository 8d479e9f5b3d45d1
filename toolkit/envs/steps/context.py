"""Everything one env build needs (`BuildContext`), and the build environment: the caller's
variables minus those that would silently change what is built, plus the recipe's `build.env`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from toolkit.envs.steps.arch import flashinfer_arch_list, torch_arch_list
from toolkit.envs.steps.ccache import CompilerCache, find_compiler_cache
from toolkit.envs.steps.pipconf import PipSources
from toolkit.envs.steps.probe import Toolchain
from toolkit.envs.steps.steps import Steps, version_of
from toolkit.envs.steps.toolchain import ToolDir, ensure_tools
from toolkit.recipe.spec import BuildSpec


@dataclass
class BuildContext:
    """Everything one env build needs; `root` is the env directory being built."""

    root: Path
    home: Path
    spec: BuildSpec
    toolchain: Toolchain
    sources: PipSources
    steps: Steps
    uv: str
    uv_cache: Path
    console: Any
    fetchcontent: dict = field(default_factory=dict)
    _exports: dict = field(default_factory=dict)
    _tools: ToolDir | None = None
    _cache: Any = None
    _cache_probed: bool = False

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def build_dir(self) -> Path:
        return self.root / ".build"

    def uv_cmd(self, *args: str) -> list[str]:
        return [self.uv, *args, "--no-config", "--cache-dir", str(self.uv_cache)]

    def build_environ(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The caller's environment minus every variable that would silently change what gets
        built (they are not part of the env key), plus the recipe's own `build.env`."""
        env = scrubbed_environ(os.environ)
        if self.toolchain.cuda_home:
            env["CUDA_HOME"] = self.toolchain.cuda_home
        if self.spec.arch:
            env["TORCH_CUDA_ARCH_LIST"] = torch_arch_list(self.spec.arch)
            env["FLASHINFER_CUDA_ARCH_LIST"] = flashinfer_arch_list(self.spec.arch)
        if self.spec.jobs:
            env["MAX_JOBS"] = str(self.spec.jobs)
            env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(self.spec.jobs)
        if self.sources.cert and "SSL_CERT_FILE" not in env:
            env["SSL_CERT_FILE"] = self.sources.cert  # pip's `cert`, for uv
        env.update(dict(self.spec.env))
        env.update(extra or {})
        return env

    def jobs(self) -> int:
        return self.spec.jobs or os.cpu_count() or 1

    def compiler_cache(self) -> CompilerCache | None:
        if not self._cache_probed:
            self._cache = find_compiler_cache()
            self._cache_probed = True
        return self._cache

    def tools(self, need: Sequence[str]) -> ToolDir:
        self._tools = ensure_tools(self.home, need, cuda_home=self.toolchain.cuda_home,
                                   nvcc_version=self.toolchain.nvcc_version, uv=self.uv,
                                   uv_cache=self.uv_cache, sources=self.sources,
                                   console=self.console, steps=self.steps)
        return self._tools

    def toolchain_record(self) -> dict:
        cache = self.compiler_cache()
        rec = {
            "python": self.toolchain.python["version"],
            "interpreter": self.toolchain.python["real_executable"],
            "nvcc": self.toolchain.nvcc,
            "nvcc_version": self.toolchain.nvcc_version,
            "cuda_home": self.toolchain.cuda_home,
            "uv": version_of([self.uv, "--version"]),
            "compiler_cache": None if cache is None else {"kind": cache.kind, "path": str(cache.path),
                                                          "version": cache.version},
        }
        if self._tools is not None:
            rec["tools"] = self._tools.record()
        return rec


# Ambient variables that change build output without being part of the env key: dropped from
# every build environment (the recipe sets what it wants through build.env, which is hashed).
# FLASHINFER_JIT_VERBOSE=1 alone turns FlashInfer 0.7.2's JIT into a -G -O0 debug build.
SCRUBBED_PREFIXES = ("FLASHINFER_", "NVCC_", "CCACHE_", "SCCACHE_", "SKBUILD_", "SGL_KERNEL_",
                     "UV_")  # uv: patchbench passes every source/setting explicitly
SCRUBBED_NAMES = ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "CONDA_PREFIX", "PYTHONNOUSERSITE",
                  "TORCH_CUDA_ARCH_LIST", "CUDAFLAGS", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS",
                  "CMAKE_ARGS", "CMAKE_BUILD_PARALLEL_LEVEL", "MAX_JOBS", "CUDA_HOME", "CUDA_PATH",
                  "CUDACXX", "BUILD_NVEP", "BUILD_NIXL_EP", "BUILD_NCCL_EP")
# transport settings (where the cache is, timeouts, TLS) do not change what is built
_KEEP = ("UV_CACHE_DIR", "UV_NATIVE_TLS", "UV_INSECURE_HOST", "UV_OFFLINE", "UV_NO_PROGRESS")
_KEEP_PREFIXES = ("UV_HTTP_", "UV_CONCURRENT_", "UV_REQUEST_")


def scrubbed_environ(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items()
            if k in _KEEP or k.startswith(_KEEP_PREFIXES)
            or not (k in SCRUBBED_NAMES or k.startswith(SCRUBBED_PREFIXES))}
