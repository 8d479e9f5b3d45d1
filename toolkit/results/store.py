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
  The run identity (`identity`, toolkit/results/identity.py) is computed by the store from those
  fields whenever a run is written.
- `samples`: one row per measured value (metric, value, unit, point, point_kind, repeat).

JSON columns are stored as text and come back parsed (`RunRow`).
"""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
import uuid
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from toolkit.errors import BadInput, PatchbenchError
from toolkit.results.identity import identity_of
from toolkit.results.schema import MIGRATIONS
from toolkit.results.records import (  # noqa: F401  (re-exported: the store's row types and keys)
    BENCH_KEY_IGNORED, RUN_FIELDS, SAMPLE_FIELDS, RunRow, SampleRow, _now, _process_start_time, bench_key,
    canonical_json, comparable_bench_params, gpu_key, process_alive)

SCHEMA_VERSION = 3
STORE_FILENAME = "results.sqlite"
STATUSES = ("running", "ok", "failed", "invalid", "interrupted")
# interrupted: its patchbench died (SIGKILL, SIGTERM, Ctrl-C) before it finished (see toolkit/run/reaper.py)
FINAL_STATUSES = ("ok", "failed", "invalid", "interrupted")
POINT_KINDS = ("batch", "concurrency")
BUSY_TIMEOUT_MS = 60_000


def default_store_path(home: Path | str | None = None) -> Path:
    """$PATCHBENCH_STORE, else `<home>/results.sqlite` (home: $PATCHBENCH_HOME, see workspace)."""
    from toolkit.workspace import default_home, default_store

    return default_store(Path(home).expanduser() if home is not None else default_home())


JSON_FIELDS = frozenset({
    "recipe_resolved", "lock", "tree_hashes", "arch_list", "bench_params", "server_argv",
    "server_info", "verification", "machine", "env_vars", "timings", "log_paths", "extra",
})
_JSON_DEFAULTS = {f.name: f.default_factory for f in fields(RunRow) if f.name in JSON_FIELDS}  # type: ignore[misc]

_IMPORTED_SQL = ("SELECT {cols} FROM runs WHERE json_extract(extra, '$.imported.file_sha256') = ? "
                 "OR json_extract(extra, '$.imported.rows_sha256') = ? ORDER BY started_at, rowid")


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
            if 0 < current < 3:
                self._backfill_identities(conn)
            if row is None:
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            elif current != SCHEMA_VERSION:
                conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _backfill_identities(self, conn: sqlite3.Connection) -> None:
        cols = [c for c in RUN_FIELDS if c != "identity"]
        rows = conn.execute(f"SELECT {', '.join(_q(c) for c in cols)} FROM runs").fetchall()
        for r in rows:
            d = dict(zip(cols, r))
            for k in JSON_FIELDS:
                d[k] = json.loads(d[k]) if d.get(k) else _JSON_DEFAULTS[k]()
            conn.execute("UPDATE runs SET identity = ? WHERE run_id = ?", (identity_of(d), d["run_id"]))

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
        if row.get("identity") is None:
            row["identity"] = identity_of(row)
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
        """Set a run's final status (ok, failed, invalid, interrupted), finished_at, error, log tail and any
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
            if "identity" not in upd:
                self._rekey_identity(conn, run_id)

    def _rekey_identity(self, conn: sqlite3.Connection, run_id: str) -> None:
        """The identity from the run's fields as they are now stored (finish may set the machine)."""
        names = ("env_key", "bench_key", "server_argv", "env_vars", "recipe_resolved", "extra", "gpu_key")
        r = conn.execute(f"SELECT {', '.join(_q(c) for c in names)} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        d = dict(zip(names, r))
        for k in JSON_FIELDS & set(names):
            d[k] = json.loads(d[k]) if d.get(k) else _JSON_DEFAULTS[k]()
        conn.execute("UPDATE runs SET identity = ? WHERE run_id = ?", (identity_of(d), run_id))

    def mark_interrupted(self, run_id: str, reason: str) -> bool:
        """Finish a run still `running` as `interrupted` with `reason` (the reaper, after its
        patchbench died). Returns False if the run had already finished."""
        with self._tx() as conn:
            cur = conn.execute("UPDATE runs SET status = 'interrupted', error = ?, finished_at = ? "
                               "WHERE run_id = ? AND status = 'running'", (reason, _now(), run_id))
            return cur.rowcount > 0

    def record_run(self, fields_: dict, samples: Iterable[Any] = ()) -> str:
        """Insert a whole run (default status `ok`) and its samples in one transaction (import,
        or a driver that measures before it stores). Returns the run id.

        An imported run (`extra["imported"]` with content hashes) whose file or rows are already
        stored is not inserted: the id of the run stored before is returned (checked inside the
        same transaction, so two imports of one file at once store it once)."""
        row = self._run_values(dict(fields_), status_default="ok")
        samples = list(samples)
        imported = (row.get("extra") or {}).get("imported") or {}
        with self._tx() as conn:
            if imported.get("file_sha256") or imported.get("rows_sha256"):
                before = conn.execute(_IMPORTED_SQL.format(cols="run_id"), (imported.get("file_sha256") or "",
                                                                           imported.get("rows_sha256") or "")).fetchone()
                if before:
                    return before[0]
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
             identity: str | Sequence[str] | None = None,
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
        any_of("identity", identity)
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

    def tracked_runs(self, recipe: str) -> list[RunRow]:
        """Runs `patchbench track` measured for `recipe` (`extra.track.recipe`), oldest first."""
        sql = (f"SELECT {', '.join(_q(c) for c in RUN_FIELDS)} FROM runs WHERE json_extract(extra, "
               "'$.track.recipe') = ? ORDER BY started_at, rowid")
        return [self._decode(r, RUN_FIELDS) for r in self._connect().execute(sql, (recipe,))]

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

    def measured_metrics(self, run_ids: Sequence[str]) -> dict[str, set[str]]:
        """run id -> the metrics it has samples of (runs without samples are absent)."""
        out: dict[str, set[str]] = {}
        conn = self._connect()
        for chunk in _chunks(list(run_ids)):
            sql = f"SELECT DISTINCT run_id, metric FROM samples WHERE run_id IN ({', '.join('?' * len(chunk))})"
            for rid, metric in conn.execute(sql, chunk):
                out.setdefault(rid, set()).add(metric)
        return out

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

    def recipe_names(self) -> list[str]:
        """Every recipe (or variant label) with at least one stored run."""
        conn = self._connect()
        return [r[0] for r in conn.execute("SELECT DISTINCT recipe FROM runs ORDER BY recipe")]

    def counts(self) -> dict[str, int]:
        """Number of runs per stored status (for `patchbench results` summaries)."""
        conn = self._connect()
        return {s: n for s, n in conn.execute("SELECT status, COUNT(*) FROM runs GROUP BY status")}

    def imported_runs(self, *, file_sha256: str | None = None, rows_sha256: str | None = None) -> list[RunRow]:
        """Runs imported from a file with this content hash (of the file's bytes, or of its rows)."""
        conn = self._connect()
        rows = conn.execute(_IMPORTED_SQL.format(cols=", ".join(_q(c) for c in RUN_FIELDS)),
                            (file_sha256 or "", rows_sha256 or "")).fetchall()
        return [self._decode(r, RUN_FIELDS) for r in rows]


def _chunks(items: list, size: int = 500) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
