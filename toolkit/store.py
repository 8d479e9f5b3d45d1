"""The SQLite results store: the only writer of results.

One file (default `$PATCHBENCH_HOME/results.sqlite`, or `$PATCHBENCH_STORE`), WAL journal, `busy_timeout`, every write an
explicit `BEGIN IMMEDIATE ... COMMIT` transaction, `synchronous=FULL`: several processes (a sweep,
a compare, an import) may write at once, and a writer killed at any instant loses at most the
transaction it had not committed. A `schema_version` table holds the version of the layout below;
a newer file than this code understands is refused, an older one is migrated.

Tables:
- `runs`: one row per benchmark run (one server launch, one repeat) with its full provenance:
  recipe (+ resolved JSON, lock), tree hashes per source, env key, sglang/FlashInfer versions, arch
  list, benchmark driver + params + `bench_key`, server argv + `/server_info`, verification, machine
  (+ `gpu_key`), group id, timestamps, timings, status, error, log paths/tail, and the writer's pid,
  host and process start time (a run left `running` by a dead process reads as "interrupted").
- `samples`: one row per measured value (metric, value, unit, point, point_kind, repeat).

JSON columns are stored as text and come back parsed (`RunRow`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import socket
import sqlite3
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, Sequence

from toolkit.errors import BadInput, PatchbenchError

SCHEMA_VERSION = 2
STORE_FILENAME = "results.sqlite"
# interrupted: the run's process (or the Slurm job around it) died before the run finished.
STATUSES = ("running", "ok", "failed", "invalid", "interrupted")
FINAL_STATUSES = ("ok", "failed", "invalid", "interrupted")
POINT_KINDS = ("batch", "concurrency")
BUSY_TIMEOUT_MS = 60_000
EXPORT_FORMAT = "patchbench-results"

# Benchmark parameters that do not change what is measured; everything else in `bench_params`
# (driver, input_len, output_len, points, seed, dataset, num_prompts, ...) must match to compare.
BENCH_KEY_IGNORED = frozenset({
    "repeats", "repeat", "timeout", "timeout_s", "host", "port", "base_url",
    "url", "output", "output_file", "result_file", "log_file", "log_path", "verbose", "disable_tqdm",
})


def default_store_path(home: Path | str | None = None) -> Path:
    """$PATCHBENCH_STORE, else `<home>/results.sqlite` (home: $PATCHBENCH_HOME, see workspace)."""
    from toolkit.workspace import default_home, default_store

    return default_store(Path(home).expanduser() if home is not None else default_home())


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

    `machine["gpu_key"]` when the provenance has one (toolkit.machine computes it); else from
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
JSON_FIELDS = frozenset({
    "recipe_resolved", "lock", "tree_hashes", "arch_list", "bench_params", "server_argv",
    "server_info", "verification", "machine", "env_vars", "timings", "log_paths", "extra",
})
_JSON_DEFAULTS = {f.name: f.default_factory for f in fields(RunRow) if f.name in JSON_FIELDS}  # type: ignore[misc]
SAMPLE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(SampleRow))

_SCHEMA_V1 = """
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    recipe TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'ok', 'failed', 'invalid')),
    recipe_resolved TEXT NOT NULL DEFAULT '{}',
    lock TEXT NOT NULL DEFAULT '{}',
    tree_hashes TEXT NOT NULL DEFAULT '{}',
    env_key TEXT,
    sglang_version TEXT,
    flashinfer_version TEXT,
    arch_list TEXT NOT NULL DEFAULT '[]',
    bench_driver TEXT,
    bench_params TEXT NOT NULL DEFAULT '{}',
    bench_key TEXT,
    server_argv TEXT NOT NULL DEFAULT '[]',
    server_info TEXT NOT NULL DEFAULT '{}',
    config_verified INTEGER,
    verification TEXT NOT NULL DEFAULT '[]',
    machine TEXT NOT NULL DEFAULT '{}',
    gpu_key TEXT NOT NULL DEFAULT 'none',
    env_vars TEXT NOT NULL DEFAULT '{}',
    "repeat" INTEGER NOT NULL DEFAULT 0,
    group_id TEXT,
    started_at TEXT,
    finished_at TEXT,
    timings TEXT NOT NULL DEFAULT '{}',
    error TEXT,
    log_paths TEXT NOT NULL DEFAULT '{}',
    log_tail TEXT,
    pid INTEGER,
    host TEXT,
    pid_started REAL,
    extra TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX runs_recipe ON runs (recipe, status);
CREATE INDEX runs_env_key ON runs (env_key);
CREATE INDEX runs_group ON runs (group_id);
CREATE TABLE samples (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    metric TEXT NOT NULL,
    value REAL NOT NULL,
    unit TEXT NOT NULL,
    point INTEGER NOT NULL,
    point_kind TEXT NOT NULL CHECK (point_kind IN ('batch', 'concurrency')),
    "repeat" INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX samples_run ON samples (run_id, metric, point);
"""

# v2: 'interrupted' joins the statuses; SQLite changes a CHECK only by rebuilding the table
# (migrations run with foreign keys off, so dropping the old table leaves the samples alone).
_RUNS_V2 = (_SCHEMA_V1.split("CREATE INDEX runs_recipe")[0]
            .replace("CREATE TABLE runs (", "CREATE TABLE runs_v2 (")
            .replace("'invalid'))", "'invalid', 'interrupted'))"))
_SCHEMA_V2 = _RUNS_V2 + """
INSERT INTO runs_v2 SELECT * FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v2 RENAME TO runs;
CREATE INDEX runs_recipe ON runs (recipe, status);
CREATE INDEX runs_env_key ON runs (env_key);
CREATE INDEX runs_group ON runs (group_id);
"""

# version -> SQL that brings version-1 to version. Append, never edit.
MIGRATIONS: dict[int, str] = {1: _SCHEMA_V1, 2: _SCHEMA_V2}


def _q(name: str) -> str:
    return f'"{name}"'


class Store:
    """The results store at `path`. One connection per process (re-opened after a fork); not
    meant to be shared between threads."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        self._conn: sqlite3.Connection | None = None
        self._conn_pid: int | None = None

    # -- connection and schema ------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None and self._conn_pid == os.getpid():
            return self._conn
        self._conn = None  # a connection inherited through fork is abandoned, never used
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_MS / 1000,
                                   isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise PatchbenchError(f"results store {self.path}: cannot use WAL journal (got {mode})")
            conn.execute("PRAGMA synchronous = FULL")
            self._migrate(conn)  # before foreign keys are on: a table rebuild must not cascade
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as e:
            raise PatchbenchError(f"results store {self.path}: {e}") from None
        except OSError as e:
            raise PatchbenchError(f"results store {self.path}: {e.strerror or e}") from None
        self._conn = conn
        self._conn_pid = os.getpid()
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT version FROM schema_version").fetchone()
            current = row[0] if row else 0
            if current > SCHEMA_VERSION:
                raise PatchbenchError(
                    f"results store {self.path} has schema version {current}, newer than this "
                    f"patchbench understands ({SCHEMA_VERSION})", hint="upgrade patchbench")
            for v in range(current + 1, SCHEMA_VERSION + 1):
                for stmt in MIGRATIONS[v].split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
            if row is None:
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            elif current != SCHEMA_VERSION:
                conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def schema_version(self) -> int:
        return int(self._connect().execute("SELECT version FROM schema_version").fetchone()[0])

    def close(self) -> None:
        if self._conn is not None and self._conn_pid == os.getpid():
            self._conn.close()
        self._conn = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: BEGIN IMMEDIATE (waits up to busy_timeout) ... COMMIT. SQLite
        errors reach the caller as one-line PatchbenchErrors; nothing of a failed one remains."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise PatchbenchError(f"results store {self.path}: {e}",
                                  hint=f"another writer held it for {BUSY_TIMEOUT_MS // 1000} s") from None
        try:
            yield conn
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            self._rollback(conn)
            raise PatchbenchError(f"results store {self.path}: {e}") from None
        except BaseException:
            self._rollback(conn)
            raise

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    # -- writes ---------------------------------------------------------------------------------
    def _run_values(self, fields_: dict, *, status_default: str) -> dict:
        unknown = set(fields_) - set(RUN_FIELDS)
        if unknown:
            raise TypeError(f"unknown run field(s): {', '.join(sorted(unknown))}")
        row = dict(fields_)
        if not row.get("recipe"):
            raise ValueError("a run needs a recipe name")
        row.setdefault("run_id", str(uuid.uuid4()))
        row.setdefault("status", status_default)
        if row["status"] not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {row['status']!r}")
        row.setdefault("started_at", _now())
        if row.get("bench_key") is None and (row.get("bench_driver") or row.get("bench_params")):
            row["bench_key"] = bench_key(row.get("bench_driver"), row.get("bench_params"))
        if row.get("gpu_key") is None:
            row["gpu_key"] = gpu_key(row.get("machine"))
        return row

    @staticmethod
    def _encode(name: str, value: Any) -> Any:
        if name in JSON_FIELDS:
            return canonical_json(value if value is not None else _JSON_DEFAULTS[name]())
        if name == "config_verified" and value is not None:
            return 1 if value else 0
        return value

    def _insert_run(self, conn: sqlite3.Connection, row: dict) -> None:
        cols = list(row)
        conn.execute(
            f"INSERT INTO runs ({', '.join(_q(c) for c in cols)}) VALUES ({', '.join('?' * len(cols))})",
            [self._encode(c, row[c]) for c in cols])

    @staticmethod
    def _sample_tuples(run_id: str, samples: Iterable[Any], repeat: int) -> list[tuple]:
        out = []
        for s in samples:
            kind = s.point_kind
            if kind not in POINT_KINDS:
                raise ValueError(f"point_kind must be one of {POINT_KINDS}, not {kind!r}")
            value = float(s.value)
            if not math.isfinite(value):
                raise ValueError(f"sample {s.metric} at {kind} {s.point}: value {value} is not finite")
            rep = getattr(s, "repeat", None)
            out.append((run_id, s.metric, value, s.unit, int(s.point), kind,
                        int(repeat if rep is None else rep)))
        return out

    def _insert_samples(self, conn: sqlite3.Connection, run_id: str, samples: Iterable[Any],
                        repeat: int | None) -> int:
        if repeat is None:
            r = conn.execute('SELECT "repeat" FROM runs WHERE run_id = ?', (run_id,)).fetchone()
            if r is None:
                raise PatchbenchError(f"results store: no run {run_id}")
            repeat = r[0]
        rows = self._sample_tuples(run_id, samples, repeat)
        conn.executemany(
            'INSERT INTO samples (run_id, metric, value, unit, point, point_kind, "repeat") '
            "VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        return len(rows)

    def begin_run(self, **fields_: Any) -> str:
        """Insert a run with status `running` (and this process's pid/host); return its run id."""
        fields_.setdefault("pid", os.getpid())
        fields_.setdefault("host", socket.gethostname())
        if fields_.get("pid_started") is None and fields_["pid"] == os.getpid():
            fields_["pid_started"] = _process_start_time(os.getpid())
        row = self._run_values(fields_, status_default="running")
        with self._tx() as conn:
            self._insert_run(conn, row)
        return row["run_id"]

    def add_samples(self, run_id: str, samples: Iterable[Any], *, repeat: int | None = None) -> int:
        """Add samples to a run in one transaction; `repeat` defaults to the run's repeat index
        (a sample object with its own `repeat` attribute keeps it). Returns how many were added."""
        samples = list(samples)
        with self._tx() as conn:
            return self._insert_samples(conn, run_id, samples, repeat)

    def finish_run(self, run_id: str, status: str, error: str | None = None,
                   log_tail: str | None = None, *, samples: Iterable[Any] | None = None,
                   **fields_: Any) -> None:
        """Set a run's final status (ok, failed, invalid), finished_at, error, log tail and any
        other run fields, together with `samples` if given, in one transaction."""
        if status not in FINAL_STATUSES:
            raise ValueError(f"final status must be one of {FINAL_STATUSES}, not {status!r}")
        unknown = set(fields_) - set(RUN_FIELDS)
        if "run_id" in fields_:
            unknown.add("run_id")
        if unknown:
            raise TypeError(f"unknown or fixed run field(s): {', '.join(sorted(unknown))}")
        upd = dict(fields_)
        upd["status"] = status
        upd.setdefault("finished_at", _now())
        if error is not None:
            upd["error"] = error
        if log_tail is not None:
            upd["log_tail"] = log_tail
        if "machine" in upd and "gpu_key" not in upd:
            upd["gpu_key"] = gpu_key(upd["machine"])
        rekey = ("bench_params" in upd or "bench_driver" in upd) and "bench_key" not in upd
        samples = list(samples) if samples is not None else []
        with self._tx() as conn:
            cur = conn.execute("SELECT bench_driver, bench_params FROM runs WHERE run_id = ?", (run_id,))
            old = cur.fetchone()
            if old is None:
                raise PatchbenchError(f"results store: no run {run_id}")
            if rekey:
                driver = upd.get("bench_driver", old[0])
                params = upd.get("bench_params", json.loads(old[1]))
                upd["bench_key"] = bench_key(driver, params)
            cols = list(upd)
            conn.execute(f"UPDATE runs SET {', '.join(f'{_q(c)} = ?' for c in cols)} WHERE run_id = ?",
                         [self._encode(c, upd[c]) for c in cols] + [run_id])
            if samples:
                self._insert_samples(conn, run_id, samples, None)

    def record_run(self, fields_: dict, samples: Iterable[Any] = ()) -> str:
        """Insert a whole run (default status `ok`) and its samples in one transaction (import,
        or a driver that measures before it stores). Returns the run id."""
        row = self._run_values(dict(fields_), status_default="ok")
        samples = list(samples)
        with self._tx() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (row["run_id"],)).fetchone():
                raise PatchbenchError(f"results store: run {row['run_id']} already exists")
            self._insert_run(conn, row)
            self._insert_samples(conn, row["run_id"], samples, int(row.get("repeat") or 0))
        return row["run_id"]

    def delete_runs(self, run_ids: Sequence[str]) -> int:
        """Delete runs and their samples; returns how many runs went."""
        n = 0
        with self._tx() as conn:
            for chunk in _chunks(list(run_ids)):
                ph = ", ".join("?" * len(chunk))
                conn.execute(f"DELETE FROM samples WHERE run_id IN ({ph})", chunk)
                n += conn.execute(f"DELETE FROM runs WHERE run_id IN ({ph})", chunk).rowcount
        return n

    # -- reads ----------------------------------------------------------------------------------
    @staticmethod
    def _decode(row: sqlite3.Row | tuple, names: Sequence[str]) -> RunRow:
        d = dict(zip(names, row, strict=True))
        for k in JSON_FIELDS:
            d[k] = json.loads(d[k]) if d.get(k) else _JSON_DEFAULTS[k]()
        if d.get("config_verified") is not None:
            d["config_verified"] = bool(d["config_verified"])
        return RunRow(**{k: d[k] for k in RUN_FIELDS})

    def runs(self, recipe: str | Sequence[str] | None = None, status: str | Sequence[str] | None = None,
             env_key: str | None = None, *, group_id: str | None = None, bench_key: str | None = None,
             gpu_key: str | None = None, run_ids: Sequence[str] | None = None,
             config_verified: bool | None = None, limit: int | None = None,
             newest_first: bool = False) -> list[RunRow]:
        """Runs matching every filter given (a list means any of), oldest first by default."""
        where, args = [], []

        def any_of(col: str, value: str | Sequence[str] | None) -> None:
            if value is None:
                return
            vals = [value] if isinstance(value, str) else list(value)
            if not vals:
                where.append("0")
                return
            where.append(f"{_q(col)} IN ({', '.join('?' * len(vals))})")
            args.extend(vals)

        any_of("recipe", recipe)
        any_of("status", status)
        any_of("env_key", env_key)
        any_of("group_id", group_id)
        any_of("bench_key", bench_key)
        any_of("gpu_key", gpu_key)
        if run_ids is not None:
            any_of("run_id", list(run_ids))
        if config_verified is not None:
            where.append("config_verified = ?" if config_verified else "(config_verified IS NULL OR config_verified = ?)")
            args.append(1 if config_verified else 0)
        sql = f"SELECT {', '.join(_q(c) for c in RUN_FIELDS)} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY started_at {'DESC' if newest_first else 'ASC'}, rowid {'DESC' if newest_first else 'ASC'}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        conn = self._connect()
        return [self._decode(r, RUN_FIELDS) for r in conn.execute(sql, args)]

    def get_run(self, run_id: str) -> RunRow:
        """The run whose id is `run_id` or starts with it (unique prefix, as git abbreviates)."""
        conn = self._connect()
        cols = ", ".join(_q(c) for c in RUN_FIELDS)
        rows = conn.execute(f"SELECT {cols} FROM runs WHERE run_id LIKE ? ESCAPE '\\' LIMIT 2",
                            (run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",)).fetchall()
        if not rows:
            raise BadInput(f"no run {run_id} in {self.path}")
        if len(rows) > 1:
            exact = [r for r in rows if r[0] == run_id]
            if not exact:
                raise BadInput(f"run id prefix {run_id} is ambiguous", hint="give more characters")
            rows = exact
        return self._decode(rows[0], RUN_FIELDS)

    def samples(self, run_ids: Sequence[str] | str, metric: str | Sequence[str] | None = None) -> list[SampleRow]:
        """Samples of the given runs (optionally only some metrics), in insertion order."""
        ids = [run_ids] if isinstance(run_ids, str) else list(run_ids)
        metrics = None if metric is None else ([metric] if isinstance(metric, str) else list(metric))
        conn = self._connect()
        out: list[SampleRow] = []
        for chunk in _chunks(ids):
            sql = ('SELECT run_id, metric, value, unit, point, point_kind, "repeat" FROM samples '
                   f"WHERE run_id IN ({', '.join('?' * len(chunk))})")
            args: list[Any] = list(chunk)
            if metrics is not None:
                sql += f" AND metric IN ({', '.join('?' * len(metrics))})"
                args += metrics
            sql += " ORDER BY id"
            out.extend(SampleRow(*r) for r in conn.execute(sql, args))
        return out

    def counts(self) -> dict[str, int]:
        """Number of runs per stored status (for `patchbench results` summaries)."""
        conn = self._connect()
        return {s: n for s, n in conn.execute("SELECT status, COUNT(*) FROM runs GROUP BY status")}

    # -- export / import ------------------------------------------------------------------------
    CSV_COLUMNS = ("run_id", "recipe", "status", "group_id", "run_repeat", "env_key", "bench_key",
                   "gpu_key", "sglang_version", "flashinfer_version", "config_verified", "started_at",
                   "finished_at", "metric", "value", "unit", "point", "point_kind", "repeat")

    def export(self, fmt: str, out: Path | str | IO[str], **filters: Any) -> int:
        """Write the runs matching `filters` (as for `runs()`) to `out` (a path or a text stream).

        "json": {"format", "schema_version", "exported_at", "runs": [{...run, "samples": [...]}]},
        everything stored, re-importable with `import_json`. "csv": one row per sample (a run
        without samples gets one row with empty sample columns), the run's identity columns
        repeated. Returns the number of runs written.
        """
        if fmt not in ("json", "csv"):
            raise BadInput(f"export format must be json or csv, not {fmt}")
        runs = self.runs(**filters)
        by_run: dict[str, list[SampleRow]] = {r.run_id: [] for r in runs}
        for s in self.samples([r.run_id for r in runs]):
            by_run[s.run_id].append(s)
        if fmt == "json":
            doc = {
                "format": EXPORT_FORMAT,
                "schema_version": SCHEMA_VERSION,
                "exported_at": _now(),
                "runs": [dict(r.to_dict(), samples=[
                    {k: v for k, v in asdict(s).items() if k != "run_id"} for s in by_run[r.run_id]
                ]) for r in runs],
            }
            text = json.dumps(doc, indent=2, sort_keys=False, ensure_ascii=False, default=str) + "\n"
        else:
            buf = io.StringIO()
            w = csv.writer(buf, lineterminator="\n")
            w.writerow(self.CSV_COLUMNS)
            for r in runs:
                head = [r.run_id, r.recipe, r.status, r.group_id or "", r.repeat, r.env_key or "",
                        r.bench_key or "", r.gpu_key, r.sglang_version or "", r.flashinfer_version or "",
                        "" if r.config_verified is None else int(r.config_verified), r.started_at or "",
                        r.finished_at or ""]
                if not by_run[r.run_id]:
                    w.writerow(head + [""] * 6)
                for s in by_run[r.run_id]:
                    w.writerow(head + [s.metric, repr(s.value), s.unit, s.point, s.point_kind, s.repeat])
            text = buf.getvalue()
        if isinstance(out, (str, Path)):
            p = Path(out)
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(p.name + f".tmp{os.getpid()}")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, p)
        else:
            out.write(text)
        return len(runs)

    def import_json(self, src: Path | str | IO[str]) -> int:
        """Record the runs of a JSON export that this store does not have yet (by run id), each in
        its own transaction. Returns the number imported."""
        try:
            if isinstance(src, (str, Path)):
                doc = json.loads(Path(src).read_text(encoding="utf-8"))
            else:
                doc = json.load(src)
        except (OSError, ValueError) as e:
            raise BadInput(f"cannot read results export {src}: {e}") from None
        if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
            raise BadInput(f"{src} is not a patchbench results export")
        if int(doc.get("schema_version", 0)) > SCHEMA_VERSION:
            raise BadInput(f"{src} has schema version {doc['schema_version']}, newer than {SCHEMA_VERSION}")
        have = {r.run_id for r in self.runs(run_ids=[r["run_id"] for r in doc.get("runs", [])])}
        n = 0
        for r in doc.get("runs", []):
            if r["run_id"] in have:
                continue
            samples = [SampleRow(run_id=r["run_id"], **s) for s in r.get("samples", [])]
            self.record_run({k: v for k, v in r.items() if k in RUN_FIELDS}, samples)
            n += 1
        return n


def _chunks(items: list, size: int = 500) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
