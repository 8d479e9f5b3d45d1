"""The run's `jit-arch` step: read with cuobjdump what every module in the launch's FlashInfer JIT cache
holds, keep it with the run (extra["flashinfer_jit"], the listing in `flashinfer_jit.log` in the run
directory) and refuse the run (`invalid`) when a module holds an arch the recipe did not declare or
predates the env (toolkit.run.jit_verdict, pure). Effects: runs cuobjdump, writes one log file.

The cache is where the launch pointed FlashInfer: FLASHINFER_WORKSPACE_BASE (the env's `jit/`,
toolkit.envs.manifest.JIT_CACHES, unless the recipe's `[server.env]` sets it), then
.cache/flashinfer/<version>/<archs>/cached_ops/<name>/<name>.so (FlashInfer 0.7.2 jit/env.py and
jit/core.py). Every module there is one this env's servers (this launch or an earlier one) built or
may load; each is said with whether this launch wrote it.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from toolkit.envs.steps.cuda import read_holds
from toolkit.envs.steps.toolchain import find_cuobjdump
from toolkit.run.attempt import Attempt, RunInvalid
from toolkit.run.jit_verdict import Module, pinned_by, verdict

LOG = "flashinfer_jit.log"


def cache_root(attempt: Attempt) -> Path:
    """FlashInfer's cache directory for this launch ($FLASHINFER_WORKSPACE_BASE/.cache/flashinfer)."""
    p = attempt.prepared
    base = dict(p.recipe.server.env).get("FLASHINFER_WORKSPACE_BASE") or \
        p.env.run_vars()["FLASHINFER_WORKSPACE_BASE"]
    return Path(os.path.expanduser(str(base))) / ".cache" / "flashinfer"


def env_built(manifest: dict) -> float | None:
    try:
        return datetime.fromisoformat(manifest["created_at"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return None


def _cuobjdump(attempt: Attempt) -> Path | None:
    toolchain = attempt.prepared.env.manifest.get("toolchain") or {}
    recorded = (toolchain.get("tools") or {}).get("cuobjdump")
    if recorded and Path(recorded).is_file():
        return Path(recorded)
    return find_cuobjdump(attempt.home, toolchain.get("cuda_home"))


def check(attempt: Attempt, samples: list | None = None) -> None:
    """Record what FlashInfer's JIT cache holds for this launch; RunInvalid (one line: the step, the
    module's .so and the log) when a module holds an undeclared arch or predates the env; `samples`: what
    the run measured, kept with it."""
    p = attempt.prepared
    root = cache_root(attempt)
    paths = sorted(root.glob("*/*/cached_ops/*/*.so")) if root.is_dir() else []
    declared = list(p.recipe.build.arch)
    record: dict = {"cache": str(root), "declared": declared, "modules": []}
    attempt.extra["flashinfer_jit"] = record
    if not paths:
        return
    log = attempt.run_dir / LOG
    attempt.logs["flashinfer_jit"] = log
    record["log"] = str(log)
    tool = _cuobjdump(attempt)
    if tool is None:
        raise RunInvalid(f"step jit-arch: {len(paths)} FlashInfer JIT module(s) in {root} and no cuobjdump "
                         "to read their arches (install the CUDA toolkit or PyPI nvidia-cuda-cuobjdump)",
                         samples=samples, config_verified=True)
    modules, text = [], []
    for so in paths:
        lines, held = read_holds(so, tool)
        mtime = so.stat().st_mtime
        shown = so.relative_to(root).as_posix()
        modules.append(Module(str(so), so.parent.name, held, mtime))
        record["modules"].append({"path": shown, "sass": sorted(held.sass), "ptx": sorted(held.ptx),
                                  "this_launch": mtime >= attempt.started, "pinned": pinned_by(so.parent.name)})
        text += [f"{so}:", *(f"    {ln}" for ln in lines or ["(no device code)"]),
                 f"    holds: SASS {', '.join(sorted(held.sass)) or '-'}; PTX {', '.join(sorted(held.ptx)) or '-'}"]
    problems = verdict(modules, declared, env_built(p.env.manifest))
    record["problems"] = problems
    log.write_text("\n".join([f"declared build.arch: {', '.join(declared) or '(none)'}", *text,
                              *(["PROBLEMS:", *problems] if problems else [])]) + "\n")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RunInvalid(f"step jit-arch: {problems[0]}{more} [cuobjdump: {log}]", problems=problems,
                         samples=samples, config_verified=True)
