"""What a stored run is: `RunRow` and `SampleRow`, and the keys that say which runs measured the
same thing (`bench_key`), on the same GPUs (`gpu_key`). Pure apart from asking psutil whether a
run's writer process is alive.

A run's `extra` may carry `imported` ({"from", "file_sha256", "rows_sha256"}: the run came from a
file, not from a measurement here) and `evidence` ({patch: "ok" | "missing" | "undeclared"}: whether
each patch showed its activation evidence), `kind` ("benchmark", "verify", "profile": what made the
run; only benchmark runs count in tables) and `model_config_sha256` (part of the run identity).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from typing import Any

# Benchmark parameters that do not change what is measured; everything else in `bench_params`
# (driver, input_len, output_len, points, seed, dataset, num_prompts, ...) must match to compare.
BENCH_KEY_IGNORED = frozenset({
    "repeats", "repeat", "timeout", "timeout_s", "host", "port", "base_url",
    "url", "output", "output_file", "result_file", "log_file", "log_path", "verbose", "disable_tqdm",
})


def comparable_bench_params(driver: str | None, params: dict | None) -> dict:
    """The part of a benchmark's identity that must match for two runs to be compared."""
    out = {"driver": driver}
    for k, v in sorted((params or {}).items()):
        if k not in BENCH_KEY_IGNORED:
            out[k] = v
    return out


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def bench_key(driver: str | None, params: dict | None) -> str:
    """sha256 of the canonical JSON of `comparable_bench_params(driver, params)`."""
    return hashlib.sha256(canonical_json(comparable_bench_params(driver, params)).encode()).hexdigest()


def gpu_key(machine: dict | None) -> str:
    """A short summary of the GPUs in `machine` provenance: "8x NVIDIA RTX PRO 6000", "none".

    `machine["gpu_key"]` when the provenance has one (toolkit.run.machine computes it); else from
    `machine["gpus"]` (dicts with "name", or names) or `machine["gpu_names"]`, as machine.gpu_key
    does: mixed machines read "4x A + 4x B" (names sorted).
    """
    machine = machine or {}
    if machine.get("gpu_key"):
        return str(machine["gpu_key"])
    gpus = machine.get("gpus")
    if gpus is None:
        gpus = machine.get("gpu_names") or []
    names = [g.get("name", "?") if isinstance(g, dict) else str(g) for g in gpus]
    if not names:
        return "none"
    return " + ".join(f"{names.count(n)}x {n}" for n in sorted(set(names)))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _process_start_time(pid: int) -> float | None:
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:
        return None


def process_alive(pid: int | None, host: str | None, started: float | None = None) -> bool | None:
    """Whether process `pid` (which started at `started`, epoch seconds) still runs on `host`.

    None when it cannot be told (another host, no pid). A pid reused by a newer process is dead.
    """
    if not pid or not host or host != socket.gethostname():
        return None
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        if started is not None and abs(p.create_time() - started) > 1.0:
            return False
        return True
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return None


@dataclass(frozen=True)
class RunRow:
    """One run as stored. JSON columns come back as Python values."""

    run_id: str
    recipe: str
    status: str = "running"
    recipe_resolved: dict = field(default_factory=dict)
    lock: dict = field(default_factory=dict)
    tree_hashes: dict = field(default_factory=dict)  # source -> git tree hash
    env_key: str | None = None
    sglang_version: str | None = None
    flashinfer_version: str | None = None
    arch_list: list = field(default_factory=list)
    bench_driver: str | None = None
    bench_params: dict = field(default_factory=dict)
    bench_key: str | None = None
    server_argv: list = field(default_factory=list)
    server_info: dict = field(default_factory=dict)
    config_verified: bool | None = None
    verification: list = field(default_factory=list)  # messages
    machine: dict = field(default_factory=dict)
    gpu_key: str = "none"
    env_vars: dict = field(default_factory=dict)  # environment given to the server/benchmark
    repeat: int = 0
    group_id: str | None = None
    started_at: str | None = None  # ISO 8601, UTC
    finished_at: str | None = None
    timings: dict = field(default_factory=dict)  # step -> seconds
    error: str | None = None
    log_paths: dict = field(default_factory=dict)
    log_tail: str | None = None
    pid: int | None = None
    host: str | None = None
    pid_started: float | None = None  # process start time, epoch seconds (pid reuse guard)
    extra: dict = field(default_factory=dict)
    identity: str | None = None  # toolkit.results.identity: the same experiment has the same key

    @property
    def kind(self) -> str:
        """What made the run: "benchmark" (the recipe's driver), "verify" (`--until verify`: a
        launch and a verdict, no measurement) or "profile" (under the profiler's overhead)."""
        kind = (self.extra or {}).get("kind")
        return str(kind or ("profile" if self.bench_driver == "profile" else "benchmark"))

    def is_interrupted(self) -> bool:
        """A `running` run whose writer process is gone (same host only)."""
        return self.status == "running" and process_alive(self.pid, self.host, self.pid_started) is False

    def display_status(self) -> str:
        """The status to show: "interrupted" for a `running` run whose process died."""
        if self.status != "running":
            return self.status
        alive = process_alive(self.pid, self.host, self.pid_started)
        if alive is False:
            return "interrupted"
        if alive is None and self.host and self.host != socket.gethostname():
            return f"running (on {self.host})"
        return "running"

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def imported(self) -> bool:
        """The run came from an imported file (JSONL or another store's export), not measured here."""
        return bool((self.extra or {}).get("imported") or (self.machine or {}).get("imported_from"))

    @property
    def missing_evidence(self) -> list[str]:
        """Patches whose activation evidence was missing (from `extra["evidence"]`)."""
        ev = (self.extra or {}).get("evidence") or {}
        return sorted(k for k, v in ev.items() if v == "missing") if isinstance(ev, dict) else []

    @property
    def broken_output(self) -> bool:
        """The output check found degenerate answers (`extra["quality"]["status"] == "broken"`)."""
        q = (self.extra or {}).get("quality") or {}
        return isinstance(q, dict) and q.get("status") == "broken"


@dataclass(frozen=True)
class SampleRow:
    """One stored sample."""

    run_id: str
    metric: str
    value: float
    unit: str
    point: int
    point_kind: str
    repeat: int


RUN_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RunRow))
SAMPLE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(SampleRow))
