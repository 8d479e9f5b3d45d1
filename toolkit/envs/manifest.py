"""A published env on disk: the `Env` value, its manifest (written atomically, last), the per-key
lock, recording a recipe's use, finding an env by key, and the variables a process in it runs with."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from filelock import FileLock

from toolkit.envs.steps.arch import flashinfer_arch_list, torch_arch_list
from toolkit.envs.steps.context import scrubbed_environ
from toolkit.envs.identity import KEY_LEN
from toolkit.errors import PatchbenchError
from toolkit.recipe.spec import BuildSpec, jsonable as _jsonable

MANIFEST = "patchbench-env.json"


@dataclass(frozen=True, eq=False)
class Env:
    """A published env: `path` holds a venv whose manifest is `manifest`."""

    key: str
    path: Path
    python: Path
    manifest: dict
    reused: bool

    @property
    def name(self) -> str:
        return self.key[:KEY_LEN]

    @property
    def spec(self) -> BuildSpec:
        return BuildSpec.from_dict(self.manifest["spec"])

    @property
    def jit_dir(self) -> Path:
        return self.path / "jit"

    def run_vars(self) -> dict[str, str]:
        """The variables that launching something in this env sets (on top of the caller's)."""
        return run_vars(self.path, self.spec, self.manifest.get("toolchain", {}).get("cuda_home"),
                        self.key)

    def run_environ(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """A complete environment for launching a process in this env (server, benchmark)."""
        # ambient FLASHINFER_*/NVCC_*/TORCH_CUDA_ARCH_LIST... would change run-time JIT builds
        env = scrubbed_environ(os.environ if base is None else base)
        extra = self.run_vars()
        extra["PATH"] = extra["PATH"] + os.pathsep + env.get("PATH", os.defpath)
        env.update(extra)
        return env


# Every run-time JIT cache a server of this env writes, under the env's own `jit/` (relative path per
# variable). sglang 0.5.23 points Triton, Inductor, the CUDA driver's PTX cache, TileLang and FlashInfer
# at SGLANG_CACHE_DIR (default ~/.cache/sglang: one directory for every sglang on the machine, every
# patched variant); older sglang leaves them at ~/.triton, /tmp/torchinductor_$USER, ~/.nv. FlashInfer's
# JIT names modules by URI, not by source, so a shared workspace serves a stale kernel to a patched
# tree; the others key by content, but a shared cache still makes one variant's first launch cheaper
# because another ran before it. Private to the env: a launch finds what this env compiled, nothing else.
JIT_CACHES = (
    ("FLASHINFER_WORKSPACE_BASE", "."),
    ("SGLANG_CACHE_DIR", "."),
    ("TRITON_CACHE_DIR", "triton"),
    ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
    ("CUDA_CACHE_PATH", "nv"),
    ("TILELANG_CACHE_DIR", "tilelang"),
    # sglang 0.5.23's own JIT kernels: SGLANG_JIT_CACHE_DIR does not follow SGLANG_CACHE_DIR (default
    # ~/.cache/sglang/jit, kernels/jit/utils/compile/cache.py); keyed by content, still one per env
    ("SGLANG_JIT_CACHE_DIR", "sglang-jit"),
    # CuTe DSL (nvidia-cutlass-dsl) compiles: default $TMPDIR/<user>/cutlass_python_cache
    ("CUTE_DSL_CACHE_DIR", "cute-dsl"),
)


def jit_vars(path: Path) -> dict[str, str]:
    """The JIT cache variables of the env at `path` (all under `path/jit`)."""
    root = path / "jit"
    return {name: str(root if sub == "." else root / sub) for name, sub in JIT_CACHES}


def jit_file_count(path: Path) -> int:
    """Files in the env's run-time caches (`path/jit`, every JIT_CACHES directory): a count that grows
    when a server of this env compiles something (a Triton, FlashInfer, Inductor or CUDA kernel)."""
    return sum(len(files) for _, _, files in os.walk(path / "jit"))


def bytecode_vars(path: Path) -> dict[str, str]:
    """Where the env's processes keep their compiled bytecode: `path/pycache` (PYTHONPYCACHEPREFIX; the
    env's own tree is never written after it is published), written even where the calling shell sets
    PYTHONDONTWRITEBYTECODE (an empty value is unset). uv installs no bytecode, and on such a box every
    launch compiled everything its processes import afresh: real sglang 0.5.23's server process imports
    took 30.1 CPU-s without bytecode and 16.2 with it (torch, transformers, sglang's scheduler; 2026-12-06,
    this 2-core box), in each of its processes, counted in every launch's "ready in" and GPU minutes. The
    first launch of an env writes it; the later ones read it, as on a box that writes bytecode beside the
    sources."""
    return {"PYTHONPYCACHEPREFIX": str(path / "pycache"), "PYTHONDONTWRITEBYTECODE": ""}


def run_vars(path: Path, spec: BuildSpec, cuda_home: str | None, key: str) -> dict[str, str]:
    v = {
        "PATH": str(path / "bin"),
        "VIRTUAL_ENV": str(path),
        "PYTHONNOUSERSITE": "1",
        **jit_vars(path),
        **bytecode_vars(path),
        "PATCHBENCH_ENV_KEY": key,
    }
    if spec.arch:
        v["FLASHINFER_CUDA_ARCH_LIST"] = flashinfer_arch_list(spec.arch)
        v["TORCH_CUDA_ARCH_LIST"] = torch_arch_list(spec.arch)
    if cuda_home:
        v["CUDA_HOME"] = cuda_home
    v.update(dict(spec.env))
    return v


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_manifest(path: Path) -> dict | None:
    try:
        return json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def write_manifest(path: Path, manifest: Mapping[str, Any]) -> None:
    """Write atomically (tmp file + rename): a reader sees the old or the new manifest."""
    tmp = path / f".{MANIFEST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(_jsonable(manifest), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path / MANIFEST)


def load_published(final: Path, key: str) -> dict | None:
    manifest = read_manifest(final)
    if manifest is None:
        return None
    if manifest.get("key") != key:
        raise PatchbenchError(
            f"env directory {final} holds key {manifest.get('key')}, not {key} (a key-prefix "
            "collision or a hand-edited env)", hint="remove that directory")
    if not (final / "bin" / "python").exists():
        return None
    return manifest


def key_lock(home: Path, key: str) -> FileLock:
    locks = home / "envs" / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    return FileLock(str(locks / f"{key[:KEY_LEN]}.lock"), thread_local=False)


def record_use(final: Path, home: Path, key: str, recipe: str | None, *,
                locked: bool = False) -> dict:
    """Add the recipe to the manifest's users and bump last_used_at (under the key's lock)."""
    if not locked:
        with key_lock(home, key):
            return record_use(final, home, key, recipe, locked=True)
    manifest = read_manifest(final) or {}
    recipes = list(manifest.get("recipes", []))
    if recipe and recipe not in recipes:
        recipes.append(recipe)
    manifest["recipes"] = recipes
    manifest["last_used_at"] = now_iso()
    write_manifest(final, manifest)
    return manifest


def find_env(home: Path, key: str) -> Env | None:
    """The published env with this full key, or None (never a partial build)."""
    final = Path(home) / "envs" / key[:KEY_LEN]
    manifest = load_published(final, key)
    if manifest is None:
        return None
    return Env(key=key, path=final, python=final / "bin" / "python", manifest=manifest,
               reused=True)


# --------------------------------------------------------------------------------------------


def remove_tree(path: Path) -> None:
    """Remove a directory tree; a symlink or file is unlinked (never followed)."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)
        if path.exists():  # read-only files: make them writable and retry
            for root, dirs, files in os.walk(path):
                for n in dirs + files:
                    try:
                        os.chmod(os.path.join(root, n), 0o700)
                    except OSError:
                        pass
            shutil.rmtree(path, ignore_errors=True)


def env_record(manifest: Mapping | None, resolved_config: Mapping | None = None) -> dict:
    """What a run keeps of its env: packages, CUDA toolchain, build arch, resolved server config."""
    manifest = manifest or {}
    toolchain = manifest.get("toolchain") or {}
    return {
        "packages": list(manifest.get("packages") or []),
        "cuda_toolchain": {k: toolchain.get(k) for k in ("nvcc_version", "cuda_home") if toolchain.get(k)},
        "arch": list(manifest.get("arch") or []),
        "resolved_config": dict(resolved_config or {}),
    }
