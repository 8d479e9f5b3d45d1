"""Live process groups of patchbench runs, and the reaper that ends those whose patchbench died.

Every server (or one-batch benchmark) patchbench starts is recorded while it runs in
`$PATCHBENCH_HOME/live/<pgid>.json`: the process group, the patchbench process that owns it
(pid + start time, so a reused pid is not mistaken for it), the run id and the store. The
supervisor (toolkit/run/supervisor.py) already ends a group when its patchbench dies; the registry is
what is left to act on when even that did not happen, and it names the run to mark.

`reap(home)` (run at the start of `patchbench run`) ends every group whose owner is dead, marks
its run `interrupted` in its store, and marks `interrupted` every other run of the store still
`running` for a dead patchbench process on this host, and removes the launch's temporary files
(toolkit.run.scratch). Effects: signals, store writes, file removal.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from filelock import FileLock

from toolkit.errors import PatchbenchError
from toolkit.run import scratch, supervisor
from toolkit.results.store import Store, process_alive

LIVE_DIR = "live"
REASON = "interrupted: its patchbench process (pid {pid}) died before the run finished"


@dataclass(frozen=True)
class LiveGroup:
    """One running process group and the patchbench process that owns it."""

    pgid: int
    pgid_started: float
    owner_pid: int
    owner_started: float
    run_id: str
    store: str
    what: str  # "server" | "one-batch"

    def owner_alive(self) -> bool:
        return process_alive(self.owner_pid, _host(), self.owner_started) is not False


def _host() -> str:
    import socket

    return socket.gethostname()


def _dir(home: Path) -> Path:
    from toolkit.errors import BadInput

    d = Path(home) / LIVE_DIR
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"patchbench home {home}: cannot write {d} ({exc.strerror or exc})",
                       hint="point PATCHBENCH_HOME (or --home) at a directory this user can write") from None
    return d


def _lock(home: Path) -> FileLock:
    return FileLock(str(_dir(home) / ".lock"))


def register(home: Path, pgid: int, *, run_id: str, store: Path, what: str) -> Path:
    """Record a live group owned by this process; returns the record's path (for `unregister`)."""
    try:
        started = psutil.Process(pgid).create_time()
    except psutil.Error:
        started = time.time()
    me = psutil.Process(os.getpid())
    rec = LiveGroup(pgid, started, me.pid, me.create_time(), run_id, str(store), what)
    path = _dir(home) / f"{pgid}.json"
    with _lock(home):
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(rec)))
        os.replace(tmp, path)
    return path


def unregister(path: Path) -> None:
    """Forget a group once its run has finished and the group was ended."""
    with _lock(path.parent):
        path.unlink(missing_ok=True)


def _members(rec: LiveGroup) -> list[psutil.Process]:
    """Processes still in the recorded group (not a newer group that reuses the id)."""
    out = []
    for p in psutil.process_iter(["pid", "create_time"]):
        try:
            if os.getpgid(p.pid) == rec.pgid and p.info["create_time"] >= rec.pgid_started - 1.0:
                out.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass
    return out


def end_group(rec: LiveGroup, grace: float = 3.0) -> int:
    """SIGTERM then SIGKILL every process of the recorded group; returns how many there were."""
    members = _members(rec)
    if not members:
        return 0
    supervisor.end_group(rec.pgid, members, grace)
    return len(members)


def reap(home: Path, store: Store | None = None) -> list[str]:
    """End groups of dead patchbench processes and mark their runs (and any other run of `store`
    left `running` by a dead process on this host) `interrupted`. Returns one line per action."""
    done: list[str] = []
    with _lock(home):
        records = []
        for path in sorted(_dir(home).glob("*.json")):
            try:
                records.append((path, LiveGroup(**json.loads(path.read_text()))))
            except (OSError, ValueError, TypeError):
                path.unlink(missing_ok=True)
        for path, rec in records:
            if rec.owner_alive():
                continue
            store_of = Store(rec.store)
            n = end_group(rec)  # a group still alive held its GPUs until now: its step counts to now
            scratch.remove(scratch.path_for(home / "runs" / rec.run_id))  # its supervisor died too: left to us
            spent = _spent(store_of, rec.run_id, until=time.time() if n else None)
            if n:
                done.append(f"ended {n} process(es) of the {rec.what} of run {rec.run_id[:8]} "
                            f"(patchbench pid {rec.owner_pid} is gone)")
            if _interrupt(store_of, rec.run_id, rec.owner_pid, spent):
                done.append(f"run {rec.run_id[:8]} marked interrupted")
            path.unlink(missing_ok=True)
    if store is not None:
        for run in store.runs(status="running"):
            if run.is_interrupted() and _interrupt(store, run.run_id, run.pid, _spent(store, run.run_id)):
                done.append(f"run {run.run_id[:8]} marked interrupted")
    return done


def _spent(store: Store, run_id: str, until: float | None = None) -> tuple[dict, str] | None:
    """(timings, note) of a `running` run killed in a step (`extra.in_step`, toolkit/run/attempt.mark_step):
    that step counted up to `until` (the reaper ended its group, alive till then), else to the last write in
    the run's directory (the server's log: its supervisor ends the group as patchbench dies, saying so), so
    the launch's cost keeps the seconds it held; None without a step."""
    try:
        run = store.get_run(run_id)
    except PatchbenchError:
        return None
    step = (run.extra or {}).get("in_step") if isinstance(run.extra, dict) else None
    if run.status != "running" or not isinstance(step, dict) or not step.get("step"):
        return None
    end = until if until is not None else _last_write(run)
    seconds = max(0.0, end - float(step.get("since") or 0.0)) if step.get("since") else 0.0
    timings = {**(run.timings or {})}
    timings[step["step"]] = round(float(timings.get(step["step"], 0.0) or 0.0) + seconds, 3)
    to = "when this reaper ended its processes" if until is not None else "the last write in its run directory"
    return timings, f"killed in its {step['step']} step: {seconds:.1f} s counted, to {to}"


def _interrupt(store: Store, run_id: str, pid: int | None, spent: tuple[dict, str] | None) -> bool:
    """Mark a dead process's run `interrupted`, with the seconds of the step it was killed in (`_spent`)."""
    reason = REASON.format(pid=pid)
    if spent is not None and store.get_run(run_id).status == "running":
        store.add_samples(run_id, [], timings=spent[0])
        reason += "; " + spent[1]
    return store.mark_interrupted(run_id, reason)


def _last_write(run) -> float:
    """The newest modification time of a file in the run's directory (0 when there is none)."""
    run_dir = (run.log_paths or {}).get("run_dir")
    newest = 0.0
    if run_dir and Path(run_dir).is_dir():
        for f in Path(run_dir).rglob("*"):
            try:
                newest = max(newest, f.stat().st_mtime)
            except OSError:
                pass
    return min(newest, time.time())
