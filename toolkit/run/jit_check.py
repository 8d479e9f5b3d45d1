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
and never unloads it; None where the server is gone, as after one-batch). A module replaced at its path
while mapped (maps says "(deleted)") is judged as the file the server ran, read through
/proc/<pid>/map_files/<range>, not the file now at the path; where that cannot be read, the run is
refused (its arches unknown).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
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


DELETED = " (deleted)"  # how /proc/<pid>/maps names a mapped file since removed or replaced at its path


@dataclass(frozen=True)
class Mapping:
    """A .so mapped by a server process: the path the kernel names, where its mapped file is read
    (/proc/<pid>/map_files/<range>: that file, even when the path now holds another), and whether the
    path was removed or replaced since it was mapped."""

    path: str
    pid: int
    read_from: str
    inode: str
    replaced: bool


def mapped(pids: Iterable[int]) -> dict[str, list[Mapping]] | None:
    """The .so files the processes `pids` have mapped, path -> its mappings; None when no maps could be read."""
    out: dict[str, list[Mapping]] | None = None
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        out = {} if out is None else out
        for line in text.splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) != 6:
                continue
            path, replaced = parts[5], parts[5].endswith(DELETED)
            path = path[:-len(DELETED)] if replaced else path
            if ".so" in path.rsplit("/", 1)[-1]:
                out.setdefault(path, []).append(Mapping(path, pid, f"/proc/{pid}/map_files/{parts[0]}", parts[4],
                                                        replaced))
    return out


def _replaced(maps: dict[str, list[Mapping]] | None, root: Path) -> list[Mapping]:
    """One mapping per file the server ran from under `root` that is no longer at its path."""
    under = str(root.resolve()) + os.sep
    seen: dict[tuple[str, str], Mapping] = {}
    for path, ms in (maps or {}).items():
        for m in ms:
            if m.replaced and path.startswith(under):
                seen.setdefault((path, m.inode), m)
    return list(seen.values())


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
    maps = mapped(server_pids)
    ran = _replaced(maps, root)  # modules replaced (or removed) at their path while the server mapped them
    if not paths and not ran:
        return record
    log = run_dir / LOG
    record["log"] = str(log)
    tool = _cuobjdump(env, home)
    if tool is None:
        record["problems"] = [f"step jit-arch: {len(paths)} FlashInfer JIT module(s) in {root} and no cuobjdump to "
                              "read their arches (install the CUDA toolkit or PyPI nvidia-cuda-cuobjdump)"]
        return record
    modules, text, unreadable = [], [], []
    # (the path as shown, the file cuobjdump reads, loaded, the mapping when the server ran another file)
    targets = [(so, so, None if maps is None else any(not m.replaced for m in maps.get(os.path.realpath(so), ())),
                None) for so in paths]
    targets += [(Path(m.path), Path(m.read_from), True, m) for m in ran]
    for so, source, loaded, gone in targets:
        shown = f"{so} (replaced since the server mapped it: its mapped file, {source})" if gone else str(so)
        try:
            mtime = source.stat().st_mtime
            lines, held = read_holds(source, tool)
        except OSError as exc:  # /proc/<pid>/map_files refused (no ptrace access), or the server just ended
            text += [f"{shown}:", f"    cannot read it: {exc.strerror or exc}"]
            if gone or loaded is not False:
                unreadable.append(f"{shown}: cannot read the module the server ran ({exc.strerror or exc}), so "
                                  "its arches are unknown; launch again without replacing FlashInfer's JIT cache "
                                  "under it")
            continue
        except PatchbenchError as exc:  # half-written by a concurrent launch of this env, or not a module
            text += [f"{shown}:", f"    {exc.message}"]
            if gone or loaded is not False or mtime >= started:
                unreadable.append(f"{shown}: cuobjdump cannot read it ({exc.message[-200:]})")
            continue
        used = loaded is not False or mtime >= started
        modules.append(Module(shown, so.parent.name, held, mtime, used=used))
        entry = {"path": so.relative_to(root).as_posix() if so.is_relative_to(root) else str(so),
                 "sass": sorted(held.sass), "ptx": sorted(held.ptx), "this_launch": mtime >= started,
                 "loaded": loaded, "pinned": pinned_by(so.parent.name)}
        record["modules"].append({**entry, "replaced": True, "read_from": str(source)} if gone else entry)
        text += [f"{shown}:", *(f"    {ln}" for ln in lines or ["(no device code)"]),
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
