"""A real one-node Slurm cluster on localhost for tests: munged, slurmctld and slurmd as root, each
with its own key, sockets, ports, state, spool, pid and log files under one directory.

`SlurmCluster(root).start()` returns the environment clients need (`SLURM_CONF`); `stop()` ends
every daemon it started, by pid. `unavailable()` says why a cluster cannot start here (no packages,
not root), so the fixture can skip with that reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "srun", "scontrol")
_SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(_SBIN))


def unavailable() -> str | None:
    """Why a one-node cluster cannot start here, or None."""
    missing = [n for n in (*DAEMONS, *CLIENTS) if not _which(n)]
    if missing:
        return (f"Slurm not installed ({', '.join(missing)} missing): "
                "apt-get install slurm-wlm munge (.ci/run does)")
    if os.geteuid() != 0:
        return "the test cluster runs slurmd/slurmctld/munged as root (SlurmUser=root); not root here"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """One node named `localhost` with all the machine's CPUs, one partition `debug` (default)."""

    node = "localhost"
    partition = "debug"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.conf = self.root / "slurm.conf"
        self.procs: dict[str, subprocess.Popen] = {}

    @property
    def environ(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        r = self.root
        for d in ("munge", "state", "spool", "log", "run"):
            (r / d).mkdir(parents=True, exist_ok=True)
        os.chmod(r / "munge", 0o700)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        cpus = os.cpu_count() or 1
        lines = {
            "ClusterName": "patchbench-test",
            "SlurmctldHost": f"{self.node}(127.0.0.1)",
            "SlurmctldPort": _free_port(),
            "SlurmdPort": _free_port(),
            "AuthType": "auth/munge",
            "CredType": "cred/munge",
            "AuthInfo": f"socket={r / 'munge' / 'munge.socket'}",
            "SlurmUser": "root",
            "SlurmdUser": "root",
            "StateSaveLocation": r / "state",
            "SlurmdSpoolDir": r / "spool",
            "SlurmctldPidFile": r / "run" / "slurmctld.pid",
            "SlurmdPidFile": r / "run" / "slurmd.pid",
            "SlurmctldLogFile": r / "log" / "slurmctld.log",
            "SlurmdLogFile": r / "log" / "slurmd.log",
            "ProctrackType": "proctrack/linuxproc",
            "TaskPlugin": "task/none",
            "SelectType": "select/cons_tres",
            "SelectTypeParameters": "CR_Core",
            "MpiDefault": "none",
            "ReturnToService": 2,
            "SchedulerType": "sched/backfill",
            "AccountingStorageType": "accounting_storage/none",
            "JobAcctGatherType": "jobacct_gather/none",
            "JobCompType": "jobcomp/none",
            "KillWait": 5,  # seconds between SIGTERM and SIGKILL on scancel/timeout
            "MinJobAge": 3600,  # finished jobs stay visible to squeue/scontrol for the test
            "SlurmctldTimeout": 30,
            "SlurmdTimeout": 30,
        }
        text = "".join(f"{k}={v}\n" for k, v in lines.items())
        text += f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n"
        text += f"PartitionName={self.partition} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP\n"
        self.conf.write_text(text)

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env={**os.environ, **self.environ}, start_new_session=True)
        log.close()

    def _client(self, *argv: str, timeout: float = 20) -> subprocess.CompletedProcess:
        return subprocess.run([_which(argv[0]), *argv[1:]], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.environ})

    def start(self, timeout: float = 60.0) -> dict[str, str]:
        why = unavailable()
        if why:
            raise RuntimeError(why)
        self._write_config()
        m = self.root / "munge"
        self._spawn("munged", [_which("munged"), "--foreground", "--force", f"--key-file={m / 'munge.key'}",
                               f"--socket={m / 'munge.socket'}", f"--pid-file={m / 'munged.pid'}",
                               f"--log-file={m / 'munged.log'}", f"--seed-file={m / 'munged.seed'}"])
        self._wait(lambda: (m / "munge.socket").exists(), 15, "munged socket")
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-c", "-i", "-f", str(self.conf)])
        self._spawn("slurmd", [_which("slurmd"), "-D", "-N", self.node, "-f", str(self.conf)])
        self._wait(self._node_idle, timeout, "node idle in sinfo/scontrol")
        return self.environ

    def _node_idle(self) -> bool:
        out = self._client("scontrol", "show", "node", self.node, timeout=10)
        return out.returncode == 0 and ("State=IDLE" in out.stdout or "State=MIXED" in out.stdout)

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with code {p.returncode}: {self.log_tail(name)}")
            try:
                if ready():
                    return
            except (OSError, subprocess.TimeoutExpired):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"Slurm test cluster: no {what} after {timeout:.0f} s: {self.log_tail('slurmd')}")

    def log_tail(self, name: str, n: int = 800) -> str:
        parts = []
        for p in (self.root / "log" / f"{name}.out", self.root / "log" / f"{name}.log"):
            if p.exists():
                parts.append(p.read_text(errors="replace")[-n:])
        return " | ".join(parts).replace("\n", " ")

    def stop(self) -> None:
        """Cancel whatever is left, then end slurmd, slurmctld and munged (each by its pid)."""
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            try:
                self._client("scancel", "--full", f"--partition={self.partition}", timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
