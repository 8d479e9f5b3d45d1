"""Adding FlashInfer modules to a published env (`patchbench build --kernels`), under its key's lock,
verified with cuobjdump and recorded in its manifest."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Sequence

from toolkit.build.context import BuildContext
from toolkit.build.cuda import verify_env
from toolkit.build.flashinfer import build_flashinfer_kernels, check_no_flashinfer_aot
from toolkit.build.pipconf import pip_sources
from toolkit.build.probe import probe_toolchain
from toolkit.build.steps import Steps
from toolkit.envs.lifecycle import uv_cache_dir
from toolkit.envs.manifest import Env, key_lock, read_manifest, write_manifest
from toolkit.errors import BadInput
from toolkit.spec import BuildSpec
from toolkit.tree import AppliedTree


def build_kernels(env: Env, trees: Sequence[AppliedTree], spec: BuildSpec,
                  names: Sequence[str], *, home: Path, console=None) -> dict:
    """Compile FlashInfer JIT modules into an existing env (`patchbench build --kernels`).

    The modules come from the env's own (patched) sources with its arch list and toolchain, so
    they are a function of the env's identity; they are verified with cuobjdump and recorded in
    the manifest. Names already built are skipped."""
    home = Path(home).expanduser().resolve()
    if console is None:
        from rich.console import Console

        console = Console(stderr=True)
    if not spec.arch:
        raise BadInput("--kernels needs build.arch in the recipe (e.g. arch = [\"12.0a\"])")
    todo = [n for n in names if n not in env.manifest.get("kernels", {})]
    if not todo:
        console.print(f"env {env.name}: kernels {', '.join(names)} already built; nothing to do")
        return dict(env.manifest.get("kernels", {}))
    toolchain = probe_toolchain(spec)
    with key_lock(home, env.key):
        manifest = read_manifest(env.path) or dict(env.manifest)
        steps = Steps(env.path, console)
        ctx = BuildContext(root=env.path, home=home, spec=spec, toolchain=toolchain,
                           sources=pip_sources(), steps=steps, uv=toolchain.uv,
                           uv_cache=uv_cache_dir(home), console=console)
        own = [v["module"] for v in manifest.get("kernels", {}).values() if isinstance(v, dict)
               and "module" in v]
        check_no_flashinfer_aot(ctx, str(env.python), where="env", own_aot=own)
        built = build_flashinfer_kernels(ctx, todo, root=env.path)
        kernels = {**manifest.get("kernels", {}), **built}
        verification = verify_env(ctx, root=env.path, kernels=kernels)
        shutil.rmtree(env.path / ".build", ignore_errors=True)
        manifest["kernels"] = kernels
        manifest["verification"] = verification
        manifest.setdefault("logs", {}).update(steps.logs)
        manifest.setdefault("timings", {}).update(steps.timings)
        manifest["toolchain"] = {**manifest.get("toolchain", {}), **ctx.toolchain_record()}
        write_manifest(env.path, manifest)
    return kernels
