"""`patchbench kernels RECIPE --op OP`: measure one op inside the recipe's env and store the table.

Steps: resolve the shapes (before anything is built: a bad --shapes fails at once) -> apply the
recipe's trees and build (or reuse) its env (`toolkit.run.pipeline.prepare`, until "build") -> ask the
env whether it has the op and which backends it offers (the probe, no kernel runs) -> without a CUDA
GPU, stop there with NoGPU (exit 3) for a GPU op -> per backend, measure every shape -> one record
per backend under $PATCHBENCH_HOME/kernels (toolkit.kernels.records). The probe runs with the env's
run environment plus the recipe's `[server.env]`, as the server would.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from toolkit.errors import BadInput, NoGPU
from toolkit.kernels import records
from toolkit.kernels.measure import Settings, check_op, measure
from toolkit.kernels.registry import OpSpec
from toolkit.kernels.shapes import Shape
from toolkit.run import machine


@dataclass
class KernelRun:
    available: dict  # the probe's check: versions, backends, device
    records: list  # stored records (dicts with "_path")


def _environ(prepared) -> dict:
    return {**prepared.env.run_environ(), **dict(prepared.recipe.server.env)}


def run_kernels(recipe, op: OpSpec, shapes: list[Shape], *, home: Path, shapes_from: str,
                backends: list[str] | None = None, settings: Settings = Settings(), frozen: bool = False,
                console: Console | None = None) -> KernelRun:
    from toolkit.run.pipeline import prepare

    console = console or Console(stderr=True)
    p = prepare(recipe, home, until="build", frozen=frozen, console=console)
    environ = _environ(p)
    log = Path(home) / "kernels" / "logs" / f"{recipe.name.replace('/', '__')}.log"
    info = check_op(p.env.python, op, environ, log=log)
    offered = list(info.get("backends") or [])
    versions = ", ".join(f"{k} {v}" for k, v in sorted((info.get("versions") or {}).items()))
    console.print(f"[bold]{recipe.name}[/]: env {p.env.key[:12]} has {op.name} ({versions}); "
                  f"backends offered: {', '.join(offered) or 'none'}")
    want = list(backends or offered)
    unknown = [b for b in want if b not in offered]
    if (settings.device or op.device) == "cuda" and not machine.has_cuda_gpu():
        raise NoGPU(f"no CUDA GPU on this machine: {recipe.name}'s env has {op.name} "
                    f"(backends {', '.join(offered) or 'none'}); timing it needs the GPU it runs on", step="measure")
    if unknown:
        raise BadInput(f"backend(s) {', '.join(unknown)} not offered by {op.name} in this env",
                       hint=f"offered here: {', '.join(offered) or 'none'}")
    if not want:
        raise BadInput(f"{op.name} offers no backend on this machine", hint="pick another op or machine")
    stored = []
    for backend in want:
        console.print(f"  measuring {op.name} \\[{backend}] at {len(shapes)} shape(s): {settings.trials} trials x "
                      f"{settings.iters} iterations, cold L2")
        result = measure(p.env.python, op, shapes, backend=backend, settings=settings, environ=environ, log=log)
        rec = {
            "recipe": recipe.name, "recipe_resolved": recipe.to_dict(), "env_key": p.env.key,
            "tree_hashes": {t.source: t.tree_hash for t in p.trees}, "arch_list": list(recipe.build.arch),
            "op": op.name, "backend": backend, "settings": settings.to_dict(), "shapes_from": shapes_from,
            "machine": machine.provenance(),
            "probe": {k: result.get(k) for k in ("versions", "device", "gpu", "capability", "flush_bytes", "python")},
            "results": result["results"],
        }
        path = records.save(home, rec)
        rec["_path"] = str(path)
        stored.append(rec)
    return KernelRun(info, stored)
