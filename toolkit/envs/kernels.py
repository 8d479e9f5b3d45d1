"""Adding FlashInfer modules to a published env (`patchbench build --kernels`), under its key's lock,
verified with cuobjdump and recorded in its manifest."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Sequence

from toolkit.envs.steps.context import BuildContext
from toolkit.envs.steps.cuda import verify_arches, verify_env
from toolkit.envs.steps.flashinfer import build_flashinfer_kernels, check_no_flashinfer_aot
from toolkit.envs.steps.pipconf import pip_sources
from toolkit.envs.steps.probe import Toolchain, probe_toolchain
from toolkit.envs.steps.steps import Steps
from toolkit.envs.lifecycle import default_console, uv_cache_dir
from toolkit.envs.manifest import Env, key_lock, read_manifest, write_manifest
from toolkit.errors import BadInput
from toolkit.recipe.spec import BuildSpec
from toolkit.tree.applied import AppliedTree


def build_kernels(env: Env, trees: Sequence[AppliedTree], spec: BuildSpec,
                  names: Sequence[str], *, home: Path, console=None) -> dict:
    """Compile FlashInfer JIT modules into an existing env (`patchbench build --kernels`).

    The modules come from the env's own (patched) sources with its arch list and toolchain, so
    they are a function of the env's identity; they are verified with cuobjdump and recorded in
    the manifest. Names already built are skipped."""
    home, console = Path(home).expanduser().resolve(), default_console(console)
    _need_arch(spec)
    todo = [n for n in names if n not in env.manifest.get("kernels", {})]
    if not todo:
        console.print(f"env {env.name}: kernels {', '.join(names)} already built; nothing to do")
        return dict(env.manifest.get("kernels", {}))
    toolchain = probe_toolchain(spec)
    with key_lock(home, env.key):
        manifest = read_manifest(env.path) or dict(env.manifest)
        ctx = _context(env, spec, home, console, toolchain)
        steps = ctx.steps
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


def build_kernel_units(env: Env, spec: BuildSpec, names: Sequence[str], only: str, *,
                       home: Path, console=None) -> dict:
    """Compile only the translation units of FlashInfer JIT modules whose source matches `only`
    (`patchbench build --kernels GEN --only PATTERN`: the tile a patch added, say), with each
    module's own flags, and check every object's arch with cuobjdump. A partial module is not a
    kernel of the env: the manifest is left as it is. Returns {name: {objects, seconds}}."""
    home, console = Path(home).expanduser().resolve(), default_console(console)
    _need_arch(spec)
    toolchain = probe_toolchain(spec)
    with key_lock(home, env.key):
        ctx = _context(env, spec, home, console, toolchain)
        built = build_flashinfer_kernels(ctx, names, root=env.path, only=only)
        objects = [env.path / o["object"] for name, info in built.items()
                   if not name.startswith("_") for o in info["objects"]]
        with ctx.steps.step("verify-only", f"cuobjdump: {len(objects)} object(s) hold "
                                           f"{', '.join(spec.arch)}"):
            found: dict = {}
            problems = verify_arches(objects, spec.arch, cuobjdump=ctx.tools(["cuobjdump"]).cuobjdump,
                                     found=found)
            for path, info in found.items():
                ctx.steps.note("verify-only", f"{path}: {', '.join(info['arches']) or '-'}")
            if problems:
                raise ctx.steps.failure("verify-only", f"an object lacks a declared arch: {problems[0]}")
        for name, info in built.items():
            for o in info.get("objects", ()) if not name.startswith("_") else ():
                o["arches"] = found[str(env.path / o["object"])]["arches"]
        shutil.rmtree(env.path / ".build", ignore_errors=True)
    return built


def _need_arch(spec: BuildSpec) -> None:
    if not spec.arch:
        raise BadInput("--kernels needs build.arch in the recipe (e.g. arch = [\"12.0a\"])")


def _context(env: Env, spec: BuildSpec, home: Path, console, toolchain: Toolchain) -> BuildContext:
    return BuildContext(root=env.path, home=home, spec=spec, toolchain=toolchain,
                        sources=pip_sources(), steps=Steps(env.path, console), uv=toolchain.uv,
                        uv_cache=uv_cache_dir(home), console=console)
