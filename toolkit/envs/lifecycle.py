"""`ensure_env`: the env for (trees, spec), reused when its key is published, otherwise built as a
list of named steps in `envs/.tmp-<key16>-<pid>/` under the key's lock and published by one rename
after its manifest is written. A failed build keeps only its logs (`.failed-<key16>-<pid>/`)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Mapping, Sequence

from filelock import Timeout

from toolkit.envs.steps.context import BuildContext
from toolkit.envs.steps.cuda import compile_cuda_sources, verify_env
from toolkit.envs.steps.flashinfer import (build_flashinfer_kernels, check_no_flashinfer_aot,
                                      needs_flashinfer_check)
from toolkit.envs.steps.pipconf import PipSources, pip_sources
from toolkit.envs.steps.probe import Toolchain, probe_toolchain
from toolkit.envs.steps.python import cleanup_build_dir, create_venv, freeze, install_trees, select_trees
from toolkit.envs.steps.steps import Steps
from toolkit.envs.identity import KEY_LEN, SCHEMA, key_inputs, validate_spec
from toolkit.envs.manifest import (Env, key_lock, load_published, now_iso, record_use,
                                   remove_tree, write_manifest)
from toolkit.errors import Interrupted, PatchbenchError
from toolkit.recipe.spec import BuildSpec, canonical_json
from toolkit.tree.applied import AppliedTree


def default_console(console):
    if console is not None:
        return console
    from rich.console import Console

    return Console(stderr=True)


def ensure_env(
    trees: Sequence[AppliedTree],
    spec: BuildSpec,
    home: Path,
    *,
    recipe: str | None = None,
    console=None,
    fetchcontent: Mapping[str, Path] | None = None,
) -> Env:
    """Return the env for (trees, spec): the published one with the same key, or a new build.

    A build runs in `envs/.tmp-<key16>-<pid>/` under the key's lock and is published by one
    `os.rename` after its manifest is written; a crash or kill -9 leaves only the `.tmp-` dir,
    which no reader ever uses and the next build of that key (or `env gc`) removes.
    """
    home = Path(home).expanduser().resolve()
    console = default_console(console)
    validate_spec(spec, trees)
    t0 = time.monotonic()
    sources = pip_sources()
    toolchain = probe_toolchain(spec)
    inputs = key_inputs(trees, spec, toolchain, sources, fetchcontent=fetchcontent)
    key = hashlib.sha256(canonical_json(inputs).encode()).hexdigest()
    envs_dir = home / "envs"
    final = envs_dir / key[:KEY_LEN]

    if load_published(final, key) is not None:
        manifest = record_use(final, home, key, recipe)
        console.print(f"env [bold]{key[:KEY_LEN]}[/]: reused (same key; nothing built, "
                      f"{time.monotonic() - t0:.1f} s)")
        return Env(key, final, final / "bin" / "python", manifest, reused=True)

    envs_dir.mkdir(parents=True, exist_ok=True)
    lock = key_lock(home, key)
    try:
        lock.acquire(timeout=1)
    except Timeout:
        console.print(f"env [bold]{key[:KEY_LEN]}[/]: another process is building it; waiting")
        lock.acquire()
    try:
        if load_published(final, key) is not None:  # built while we waited
            manifest = record_use(final, home, key, recipe, locked=True)
            console.print(f"env [bold]{key[:KEY_LEN]}[/]: reused (built by another process)")
            return Env(key, final, final / "bin" / "python", manifest, reused=True)
        if final.exists():  # an unpublishable leftover (no manifest): never used, replace it
            remove_tree(final)
        for stale in envs_dir.glob(f".tmp-{key[:KEY_LEN]}-*"):  # we hold the lock: all stale
            console.print(f"env {key[:KEY_LEN]}: removing interrupted build {stale.name}")
            remove_tree(stale)
        tmp = envs_dir / f".tmp-{key[:KEY_LEN]}-{os.getpid()}"
        console.print(f"env [bold]{key[:KEY_LEN]}[/]: building ({spec.mode} mode, "
                      f"Python {toolchain.python['version']}) in {tmp}")
        try:
            manifest = _build(tmp, key, inputs, trees, spec, toolchain, sources, home, recipe,
                              console, fetchcontent)
            manifest["timings"]["total"] = round(time.monotonic() - t0, 3)
            write_manifest(tmp, manifest)  # last: the env is complete
            os.rename(tmp, final)  # publish
        except BaseException as e:
            _salvage_failure(tmp, envs_dir, key, e)
            raise
    finally:
        lock.release()
    console.print(f"env [bold]{key[:KEY_LEN]}[/]: built in {time.monotonic() - t0:.1f} s -> {final}")
    return Env(key, final, final / "bin" / "python", manifest, reused=False)


def _salvage_failure(tmp: Path, envs_dir: Path, key: str, err: BaseException) -> None:
    """Keep the failed build's logs (the error points at them), drop the rest."""
    if not tmp.exists():
        return
    failed = envs_dir / f".failed-{key[:KEY_LEN]}-{os.getpid()}"
    try:
        if failed.exists():
            remove_tree(failed)
        if (tmp / "logs").is_dir():
            failed.mkdir(parents=True)
            os.rename(tmp / "logs", failed / "logs")
            if isinstance(err, (PatchbenchError, Interrupted)) and err.log:
                log = Path(err.log)
                try:
                    err.log = failed / "logs" / log.relative_to(tmp / "logs")
                except ValueError:
                    pass
            if isinstance(err, PatchbenchError):  # the paths the message names are where the logs are now
                err.message = err.message.replace(str(tmp / "logs"), str(failed / "logs"))
    finally:
        remove_tree(tmp)



def uv_cache_dir(home: Path) -> Path:
    """uv's cache: the default one (shared with the user's uv) if on home's filesystem, so that
    installs hardlink; otherwise `home/uv-cache`. UV_CACHE_DIR wins when set."""
    if os.environ.get("UV_CACHE_DIR"):
        return Path(os.environ["UV_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    default = Path(xdg) / "uv"

    def device(p: Path) -> int | None:
        while not p.exists() and p != p.parent:
            p = p.parent
        try:
            return p.stat().st_dev
        except OSError:
            return None

    return default if device(default) == device(home) else home / "uv-cache"


def _build(tmp: Path, key: str, inputs: dict, trees: Sequence[AppliedTree], spec: BuildSpec,
           toolchain: Toolchain, sources: PipSources, home: Path, recipe: str | None, console,
           fetchcontent: Mapping[str, Path] | None) -> dict:
    """The build as a list of named steps; each returns what the manifest records."""
    tmp.mkdir(parents=True)
    steps = Steps(tmp, console, recipe=recipe)
    ctx = BuildContext(
        root=tmp, home=home, spec=spec, toolchain=toolchain, sources=sources, steps=steps,
        uv=toolchain.uv, uv_cache=uv_cache_dir(home), console=console,
        fetchcontent=dict(fetchcontent or {}),
    )
    created_at = now_iso()
    create_venv(ctx)
    selected = select_trees(trees, spec)
    if needs_flashinfer_check(selected, spec) and spec.mode == "overlay":
        check_no_flashinfer_aot(ctx, toolchain.python["executable"], where="base_python")
    installed = install_trees(ctx, selected)
    if needs_flashinfer_check(selected, spec):
        check_no_flashinfer_aot(ctx, str(ctx.python), where="env")
    cuda = compile_cuda_sources(ctx, trees) if spec.cuda else {}
    kernels = build_flashinfer_kernels(ctx, spec.kernels) if spec.kernels else {}
    verification = verify_env(ctx, kernels=kernels)
    packages = freeze(ctx)
    cleanup_build_dir(ctx)
    now = now_iso()
    return {
        "schema": SCHEMA,
        "key": key,
        "name": key[:KEY_LEN],
        "recipes": [recipe] if recipe else [],
        "created_at": created_at,
        "last_used_at": now,
        "published_at": now,
        "inputs": inputs,
        "spec": spec.to_dict(),
        "mode": spec.mode,
        "trees": [t.to_dict() for t in trees],
        "python": {"version": toolchain.python["version"],
                   "interpreter": toolchain.python["real_executable"],
                   "implementation": toolchain.python["implementation"]},
        "base": ({"python": toolchain.python["executable"],
                  "site_dirs": toolchain.python["site_dirs"],
                  "packages": toolchain.python["dists"],
                  "torch": toolchain.python["torch"]} if spec.mode == "overlay" else None),
        "toolchain": ctx.toolchain_record(),
        "arch": list(spec.arch),
        "env_vars": dict(spec.env),
        "pip_sources": {"origin": list(sources.origin), **sources.identity()},
        "installed": installed,
        "packages": packages,
        "cuda": cuda,
        "kernels": kernels,
        "verification": verification,
        "logs": dict(steps.logs),
        "timings": dict(steps.timings),
        "uv_cache": str(ctx.uv_cache),
    }
