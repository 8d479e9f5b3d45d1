"""The run's `jit-arch` step (and a profile run's same check): read with cuobjdump what every module in the launch's FlashInfer JIT cache
holds, keep it with the run (extra["flashinfer_jit"], the listing in `flashinfer_jit.log` in the run
directory) and refuse the run (`invalid`) when a module holds an arch the recipe did not declare or
predates the env (toolkit.run.jit_verdict, pure). Effects: runs cuobjdump, writes one log file.

The cache is where the launch pointed FlashInfer: FLASHINFER_WORKSPACE_BASE (the env's `jit/`,
toolkit.envs.manifest.JIT_CACHES, unless the recipe's `[server.env]` sets it), then
.cache/flashinfer/<version>/<archs>/cached_ops/<name>/<name>.so (FlashInfer 0.7.2 jit/env.py and
jit/core.py). Every module there is one this env's servers (this launch or an earlier one) built or
may load; each is said with whether this launch wrote it and whether the server's processes have it
mapped now (/proc/<pid>/maps of the server's tree: FlashInfer dlopens a module, tvm_ffi.load_module,
and never unloads it; None where the server is gone, as after one-batch).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Iterable

from toolkit.envs.steps.cuda import read_holds
from toolkit.envs.steps.toolchain import find_cuobjdump
from toolkit.envs import Env
from toolkit.errors import PatchbenchError
from toolkit.recipe.load import Recipe
from toolkit.run.attempt import Attempt, RunInvalid
from toolkit.run.gpustate.owners import tree_of
from toolkit.envs.steps.flashinfer_pinned import pinned_by
from toolkit.run.jit_verdict import Module, verdict

LOG = "flashinfer_jit.log"


def cache_root(recipe: Recipe, env: Env) -> Path:
    """FlashInfer's cache directory for a launch ($FLASHINFER_WORKSPACE_BASE/.cache/flashinfer)."""
    base = dict(recipe.server.env).get("FLASHINFER_WORKSPACE_BASE") or env.run_vars()["FLASHINFER_WORKSPACE_BASE"]
    return Path(os.path.expanduser(str(base))) / ".cache" / "flashinfer"


def env_built(manifest: dict) -> float | None:
    try:
        return datetime.fromisoformat(manifest["created_at"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return None


def _cuobjdump(env: Env, home: Path) -> Path | None:
    toolchain = env.manifest.get("toolchain") or {}
    recorded = (toolchain.get("tools") or {}).get("cuobjdump")
    if recorded and Path(recorded).is_file():
        return Path(recorded)
    return find_cuobjdump(home, toolchain.get("cuda_home"))


def mapped(pids: Iterable[int]) -> set[str] | None:
    """The .so files the processes `pids` have mapped (resolved paths); None when none could be read."""
    out: set[str] | None = None
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        out = out or set()
        out |= {line.split(maxsplit=5)[5] for line in text.splitlines()
                if len(line.split(maxsplit=5)) == 6 and ".so" in line.rsplit("/", 1)[-1]}
    return out


def inspect(recipe: Recipe, env: Env, home: Path, run_dir: Path, started: float,
            server_pids: Iterable[int] = ()) -> dict:
    """What the launch's FlashInfer JIT cache holds, as the run keeps it (extra["flashinfer_jit"]):
    cache, declared, modules [{path, sass, ptx, this_launch (written after `started`), loaded (mapped
    by `server_pids` now; None: unknown), pinned}],
    problems (one line each, the step named; empty: as declared) and, when there are modules, the log
    holding cuobjdump's listings (`run_dir`/flashinfer_jit.log)."""
    root = cache_root(recipe, env)
    paths = sorted(root.glob("*/*/cached_ops/*/*.so")) if root.is_dir() else []
    declared = list(recipe.build.arch)
    record: dict = {"cache": str(root), "declared": declared, "modules": [], "problems": []}
    if not paths:
        return record
    log = run_dir / LOG
    record["log"] = str(log)
    tool = _cuobjdump(env, home)
    if tool is None:
        record["problems"] = [f"step jit-arch: {len(paths)} FlashInfer JIT module(s) in {root} and no cuobjdump to "
                              "read their arches (install the CUDA toolkit or PyPI nvidia-cuda-cuobjdump)"]
        return record
    modules, text, unreadable = [], [], []
    maps = mapped(server_pids)
    for so in paths:
        mtime = so.stat().st_mtime
        loaded = None if maps is None else os.path.realpath(so) in maps
        used = loaded is not False or mtime >= started
        try:
            lines, held = read_holds(so, tool)
        except PatchbenchError as exc:  # half-written by a concurrent launch of this env, or not a module
            text += [f"{so}:", f"    {exc.message}"]
            if used:
                unreadable.append(f"{so}: cuobjdump cannot read it ({exc.message[-200:]})")
            continue
        modules.append(Module(str(so), so.parent.name, held, mtime, used=used))
        record["modules"].append({"path": so.relative_to(root).as_posix(), "sass": sorted(held.sass),
                                  "ptx": sorted(held.ptx), "this_launch": mtime >= started, "loaded": loaded,
                                  "pinned": pinned_by(so.parent.name)})
        text += [f"{so}:", *(f"    {ln}" for ln in lines or ["(no device code)"]),
                 f"    holds: SASS {', '.join(sorted(held.sass)) or '-'}; PTX {', '.join(sorted(held.ptx)) or '-'}"]
    problems = unreadable + verdict(modules, declared, env_built(env.manifest))
    log.write_text("\n".join([f"declared build.arch: {', '.join(declared) or '(none)'}", *text,
                              *(["PROBLEMS:", *problems] if problems else [])]) + "\n")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        record["problems"] = [f"step jit-arch: {problems[0]}{more} [cuobjdump: {log}]", *problems[1:]]
    return record


def check(attempt: Attempt, samples: list | None = None, server_pid: int | None = None) -> None:
    """The pipeline's step: `inspect` kept with the run; RunInvalid (one line: the step, the module's
    .so and the log) when a module holds an undeclared arch or predates the env; `samples`: what the
    run measured, kept with it; `server_pid`: the live server, whose tree's mapped modules are read."""
    p = attempt.prepared
    record = attempt.extra["flashinfer_jit"] = inspect(p.recipe, p.env, attempt.home, attempt.run_dir,
                                                       attempt.started, tree_of(server_pid) if server_pid else ())
    if record.get("log"):
        attempt.logs["flashinfer_jit"] = Path(record["log"])
    if record["problems"]:
        raise RunInvalid(record["problems"][0], problems=record["problems"], samples=samples,
                         config_verified=True)
