"""A tiny supervisor that ties a process group to the life of patchbench.

    python supervisor.py PARENT_PID [--scratch DIR] -- ARGV...

Started by patchbench (toolkit/run/server.py `spawn`) in a new session, so its pid is the process
group of everything below it. It asks the kernel for SIGTERM when its parent dies
(prctl(PR_SET_PDEATHSIG)), starts ARGV in the same group and waits:

- ARGV exits: the supervisor exits the same way (its code, or the same signal).
- patchbench dies (SIGKILL, SIGTERM, a crash) or sends SIGTERM/SIGINT: the whole group gets SIGTERM,
  then SIGKILL after a short grace, together with any descendant that left the group.
- either way, `--scratch DIR` (the launch's temporary files, toolkit/run/scratch.py) is removed once the
  processes that wrote there are gone, and so are the /dev/shm files the group made and had mapped
  (sglang 0.5.23's load snapshot: `_shm_files`, looked for while it runs and when it ends).

Run by file path with patchbench's own Python (psutil finds descendants that called setsid), so it
starts in a fraction of a second. The functions below `main` are patchbench's side: `spawn` a
supervised group, `end_group` it.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time

import psutil

PR_SET_PDEATHSIG = 1
GRACE_S = 2.0
POLL_S = 0.2
# psutil finds descendants by reading every process's /proc/PID/stat (~6 ms of CPU on a box running 300
# processes): done every POLL_S that was ~3% of a core for each launch, however long it served. While
# the tree stays the same the scan waits twice as long each time, up to SCAN_MAX_S; a change (a process
# started or gone) brings it back to POLL_S. Ending the group scans once more whatever the interval.
SCAN_MAX_S = 3.2

_stop = False


def _on_signal(signum, frame) -> None:
    global _stop
    _stop = True


def _set_parent_death_signal() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the polling of the parent pid below still works
        pass


def _descendants() -> list:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _end_group(child: subprocess.Popen, seen: dict, scratch: str | None, shm: set) -> None:
    """SIGTERM to the group; after GRACE_S (or once all are gone) SIGKILL to the group and every
    descendant seen, Python's resource trackers last (they unlink the named semaphores of their
    processes once those are gone); then what the group left behind is removed: the /dev/shm files it
    had mapped and made (_shm_files), and the scratch directory. The tree is scanned first: a
    descendant that left the group since the last scan is still below its parent now, and would be an
    orphan (no longer found) once the group's SIGTERM has ended that parent."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for p in _descendants():
        seen.setdefault(p.pid, p)
    pgid = os.getpgrp()
    procs = list(seen.values())
    shm = shm | set(_shm_files(procs))
    try:
        os.killpg(pgid, signal.SIGTERM)
    except OSError:
        pass
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and (child.poll() is None or _alive(procs, trackers=False)):
        time.sleep(0.05)
    procs = list({p.pid: p for p in procs + _descendants()}.values())
    trackers = [p for p in procs if _is_tracker(p)]
    _kill([p for p in procs if p not in trackers])
    wait_exited(procs, TRACKER_S)  # a tracker exits by itself once its processes are gone
    _kill(trackers)
    wait_exited(trackers, 1.0)
    _unlink(shm)
    _remove(scratch)
    os.killpg(pgid, signal.SIGKILL)  # ends this process too


TRACKER_S = 2.0
SCAN_S = 1.0


def _unlink(paths) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass


def _is_tracker(p) -> bool:
    try:
        return "multiprocessing.resource_tracker" in " ".join(p.cmdline())
    except Exception:
        return False


def _alive(procs: list, *, trackers: bool) -> bool:
    """Whether one of `procs` (resource trackers only with `trackers`) still runs."""
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE and (trackers or not _is_tracker(p)):
                return True
        except Exception:
            pass
    return False


def _kill(procs: list) -> None:
    for p in procs:
        try:
            p.kill()
        except Exception:
            pass


def _shm_files(procs: list) -> list[str]:
    """The /dev/shm files (POSIX shared memory, named semaphores: sglang 0.5.23's load snapshot
    /dev/shm/sglang_loads_<instance>.shm, multiprocessing's sem.mp-*) that the group's processes have
    mapped and that were made since the group started: theirs, left behind when they are killed before
    their own cleanup."""
    started = psutil.Process().create_time() - 1.0
    out = set()
    for p in procs:
        try:
            with open(f"/proc/{p.pid}/maps") as fh:
                for line in fh:
                    fields = line.split(None, 5)
                    path = fields[5].strip() if len(fields) == 6 else ""
                    if path.startswith("/dev/shm/") and not path.endswith("(deleted)"):
                        out.add(path)
        except OSError:
            pass
    return sorted(f for f in out if _made_since(f, started))


def _made_since(path: str, started: float) -> bool:
    try:
        return os.stat(path).st_ctime >= started
    except OSError:
        return False


def _remove(scratch: str | None) -> None:
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str]) -> int:
    scratch = None
    if len(argv) > 2 and argv[1] == "--scratch":
        scratch, argv = argv[2], [argv[0], *argv[3:]]
    if len(argv) < 3 or argv[1] != "--":
        print("usage: supervisor.py PARENT_PID [--scratch DIR] -- ARGV...", file=sys.stderr)
        return 2
    parent = int(argv[0])
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
    _set_parent_death_signal()
    if os.getppid() != parent:  # the parent died before the death signal was armed
        return 1
    child = subprocess.Popen(argv[2:], stdin=subprocess.DEVNULL)
    seen: dict = {}
    shm: set = set()  # the group's /dev/shm files, looked for at 1, 2, 4, ... 60 s, then every minute
    gap, shm_at = SCAN_S, time.monotonic() + SCAN_S
    scan = Scan()
    while True:
        code = child.poll()
        if code is not None:  # it exited by itself (a crash): what its processes made goes with it
            _unlink(shm | set(_shm_files(list(seen.values()) + _descendants())))
            _remove(scratch)
            if code < 0:
                if -code not in (signal.SIGKILL, signal.SIGSTOP):  # those two take no handler
                    signal.signal(-code, signal.SIG_DFL)
                os.kill(os.getpid(), -code)
            return code
        if _stop or os.getppid() != parent:  # said in the log: its last write marks when the launch ended
            gone = "asked to stop" if os.getppid() == parent else f"patchbench (pid {parent}) is gone"
            print(f"[supervisor] {time.strftime('%Y-%m-%d %H:%M:%S')} {gone}: ending the group", flush=True)
            _end_group(child, seen, scratch, shm)
        if scan.due(time.monotonic()):
            found = _descendants()
            for p in found:
                seen.setdefault(p.pid, p)
            scan.scanned(time.monotonic(), {p.pid for p in found})
        if time.monotonic() >= shm_at:
            shm.update(_shm_files(list(seen.values())))
            gap = min(2 * gap, 60.0)
            shm_at = time.monotonic() + gap
        time.sleep(POLL_S)


class Scan:
    """When the next scan for descendants is due: POLL_S after a change of the tree, then twice as
    long after each scan that found the same processes, at most SCAN_MAX_S."""

    def __init__(self) -> None:
        self.pids: set | None = None
        self.wait = POLL_S
        self.next = 0.0

    def due(self, now: float) -> bool:
        return now >= self.next

    def scanned(self, now: float, pids: set) -> None:
        self.wait = min(2 * self.wait, SCAN_MAX_S) if pids == self.pids else POLL_S
        self.pids = pids
        self.next = now + self.wait



# ------------------------------------------------------------------ patchbench's side (imported)

def spawn(argv: list[str], *, log, environ: dict, scratch=None) -> subprocess.Popen:
    """Start ARGV under a supervisor in a new process group whose id is the returned process's
    pid; ARGV's output (and the supervisor's) is appended to `log`. `scratch`: the launch's temporary
    directory (toolkit/run/scratch.py), which the supervisor removes when the group ends. Raises OSError."""
    own = ["--scratch", str(scratch)] if scratch is not None else []
    with open(log, "ab") as fh:
        fh.write(("$ " + " ".join(str(a) for a in argv) + "\n").encode())
        fh.flush()
        # -I: the env's PYTHONPATH/PYTHONHOME (meant for ARGV) must not reach patchbench's own Python
        return subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__), str(os.getpid()), *own, "--", *argv],
                                stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=environ, start_new_session=True)


def kill_group(pgid: int, sig: int) -> bool:
    """Send `sig` to process group `pgid`; False if no process of it is left."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """End a spawned group: SIGTERM, SIGKILL after `grace` seconds (or once only zombies are left: see
    `wait_exited`), then reap the supervisor."""
    if kill_group(proc.pid, signal.SIGTERM):
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and kill_group(proc.pid, 0):
            proc.poll()
            if not _group_running(proc.pid):
                break
            time.sleep(0.05)
        kill_group(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def end_group(pgid: int, procs: list, grace: float) -> None:
    """SIGTERM group `pgid` and `procs` (psutil processes, e.g. descendants that left the group);
    after `grace` seconds SIGKILL the group and whatever of `procs` is alive; wait for them."""
    kill_group(pgid, signal.SIGTERM)
    _each(procs, psutil.Process.terminate)
    alive = wait_exited(procs, grace)
    kill_group(pgid, signal.SIGKILL)
    _each(alive, psutil.Process.kill)
    wait_exited(alive, 5)


def wait_exited(procs: list, timeout: float) -> list:
    """Those of `procs` still running once none is or `timeout` seconds passed. A zombie has exited:
    what is left of it is its parent's wait, and an orphan's parent is PID 1, which in a container
    reaps late or never (docker without --init). psutil.wait_procs counts a zombie as alive: a server
    that died before reaping its subprocess (the miniature's detokenizer, sglang's scheduler) held
    each stop of its launch for this box's init (about 2 s), or for the grace and 5 s more."""
    deadline = time.monotonic() + timeout
    alive = list(procs)
    while True:
        alive = [p for p in alive if _running(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.02)  # polling the processes' state, as psutil.wait_procs does


def _group_running(pgid: int) -> bool:
    """Whether a process of group `pgid` has not exited (its zombies have: they wait for their parent)."""
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and _running(p):
                return True
        except (OSError, psutil.Error):
            pass
    return False


def _running(p) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _each(procs: list, action) -> None:
    """`action(p)` for every process, ignoring those already gone."""
    for p in procs:
        try:
            action(p)
        except psutil.Error:
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
