"""The results store: the only writer of results, on SQLite (default) or PostgreSQL.

Where it is: a path or a `postgresql://` URL (toolkit/results/engine.py: `--store`,
`$PATCHBENCH_STORE`, the user config's `[store] url`, else `HOME/results.sqlite`). Its tables:
toolkit/results/tables.py, one definition for both engines; migrations: toolkit/results/migrations/
(run when a store is first opened; a store newer than this code is refused).

Every write is one transaction (SQLite: `BEGIN IMMEDIATE`, WAL, `synchronous=FULL`; PostgreSQL:
READ COMMITTED): several processes (a sweep, a compare, an import, Slurm nodes) may write at once,
readers never see half a run, and a writer killed at any instant loses at most the transaction it had
not committed. A run left `running` by a dead process reads as "interrupted". The run identity
(`identity`, toolkit/results/identity.py) is computed by the store from a run's fields whenever a
run is written. Database errors reach callers as one-line PatchbenchErrors; a connection lost to the
server is a `StoreUnavailable`. JSON columns are stored as text and come back parsed (`RunRow`).
"""

from __future__ import annotations

import json
import math
import os
import socket
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import sqlalchemy as sa

from toolkit.errors import BadInput, PatchbenchError
from toolkit.results import tables as T
from toolkit.results.engine import BUSY_TIMEOUT_MS, STORE_FILENAME, display, is_disconnect, is_url, make_engine  # noqa: F401
from toolkit.results.identity import identity_of
from toolkit.results.migrations import ensure_schema
from toolkit.results.migrations.legacy import JSON_DEFAULTS as _JSON_DEFAULTS, JSON_FIELDS, decode_json
from toolkit.results.run_rows import StoreCorrupt, decode_run  # noqa: F401  (StoreCorrupt: re-exported)
from toolkit.results.store_errors import RunExists, StoreUnavailable, first_line as _first_line, store_error  # noqa: F401
from toolkit.results.schema import MIGRATIONS  # noqa: F401  (the pre-Alembic SQL, for old files)
from toolkit.results.records import (  # noqa: F401  (re-exported: the store's row types and keys)
    BENCH_KEY_IGNORED, RUN_FIELDS, SAMPLE_FIELDS, RunRow, SampleRow, _now, _process_start_time, bench_key,
    canonical_json, comparable_bench_params, gpu_key, process_alive)

SCHEMA_VERSION = T.SCHEMA_VERSION
STATUSES = T.STATUSES
# interrupted: its patchbench died (SIGKILL, SIGTERM, Ctrl-C) before it finished (see toolkit/run/reaper.py)
FINAL_STATUSES = ("ok", "failed", "invalid", "interrupted")
POINT_KINDS = T.POINT_KINDS
_RUN_COLS = [T.runs.c[c] for c in RUN_FIELDS]
_SAMPLE_COLS = [T.samples.c[c] for c in SAMPLE_FIELDS]




def default_store_path(home: Path | str | None = None) -> Path | str:
    """$PATCHBENCH_STORE, else the user config's `[store] url`, else `<home>/results.sqlite` (home:
    $PATCHBENCH_HOME, see workspace): a path or a URL (toolkit/results/engine.store_location)."""
    from toolkit.results.engine import store_location
    from toolkit.workspace import default_home

    return store_location(Path(home).expanduser() if home is not None else default_home())


def _derived(extra: dict | None) -> dict:
    """The indexed columns the store keeps from a run's `extra` (tables.py)."""
    extra = extra or {}
    imported = extra.get("imported") or {}
    track = extra.get("track")
    return {"imported_file_sha256": imported.get("file_sha256") or None,
            "imported_rows_sha256": imported.get("rows_sha256") or None,
            "track_recipe": track.get("recipe") if isinstance(track, dict) else None}


class Store:
    """The results store at `path` (a SQLite file path or a PostgreSQL URL). One connection per
    process (re-opened after a fork); not meant to be shared between threads.

    `path`: the SQLite file, or for PostgreSQL the URL with its password masked (what messages
    show); `location`: what to hand another process to open the same store."""

    def __init__(self, path: Path | str | None = None) -> None:
        loc = path if path is not None else default_store_path()
        self.location: str | Path = str(loc) if is_url(str(loc)) else Path(loc)
        self.engine_name = "postgresql" if is_url(str(loc)) else "sqlite"
        self.path = display(loc) if self.engine_name == "postgresql" else Path(loc)
        self._engine_: sa.Engine | None = None
        self._engine_pid: int | None = None
        self.artifacts_dir: Path | None = None  # [store] artifacts: where runs' files are kept (artifacts.py)

    # -- connection and schema ------------------------------------------------------------------
    def _engine(self) -> sa.Engine:
        if self._engine_ is not None and self._engine_pid == os.getpid():
            return self._engine_
        if self._engine_ is not None:
            self._engine_.dispose(close=False)  # inherited through fork: abandoned, never used
        self._engine_ = None
        try:
            engine = self._open()
        except sa.exc.DBAPIError as e:
            raise self._error(e) from None
        except OSError as e:
            raise PatchbenchError(f"results store {self.path}: {e.strerror or e}") from None
        except PatchbenchError as e:
            if str(self.path) in e.message:
                raise
            raise PatchbenchError(f"results store {self.path}: {e.message}", hint=e.hint) from None
        self._engine_, self._engine_pid = engine, os.getpid()
        return engine

    def _open(self) -> sa.Engine:
        """make_engine + ensure_schema. SQLite: a brand-new file opened by several processes at once
        can answer "database is locked" at once, without its busy timeout (switching the new file to
        WAL takes an exclusive lock that SQLite does not wait for); opening again after a short
        random pause, within the same busy timeout, lets the first opener finish."""
        import random
        import time

        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            engine = make_engine(self.location)
            try:
                ensure_schema(engine, str(self.path))
                return engine
            except sa.exc.OperationalError as e:
                engine.dispose()
                if self.engine_name != "sqlite" or "locked" not in _first_line(e) or time.monotonic() > deadline:
                    raise
                time.sleep(random.uniform(0.02, 0.2))

    def _error(self, e: sa.exc.DBAPIError) -> PatchbenchError:
        return store_error(e, self.path, self.engine_name)

    def lease(self, key: str):
        """A context manager yielding whether this process now holds `key` (toolkit.results.lease)."""
        from toolkit.results.lease import hold

        return hold(self._engine(), self.engine_name, self.path, key)

    def schema_version(self) -> int:
        with self._read() as conn:
            return int(conn.execute(sa.select(T.schema_version.c.version)).scalar_one())

    def close(self) -> None:
        if self._engine_ is not None:
            self._engine_.dispose(close=self._engine_pid == os.getpid())
        self._engine_ = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict:  # pickled to a child (submitit, multiprocessing): no engine
        return {**self.__dict__, "_engine_": None, "_engine_pid": None}

    @contextmanager
    def _tx(self) -> Iterator[sa.Connection]:
        """One write transaction (SQLite: BEGIN IMMEDIATE, waits up to busy_timeout) committed at the
        end; database errors reach the caller as one-line PatchbenchErrors; nothing of a failed one
        remains."""
        engine = self._engine()
        try:
            with engine.connect() as conn:
                conn.execution_options(patchbench_write=True)
                with conn.begin():
                    yield conn
        except sa.exc.DBAPIError as e:
            raise self._error(e) from None

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        engine = self._engine()
        try:
            with engine.connect() as conn:
                yield conn
        except sa.exc.DBAPIError as e:
            raise self._error(e) from None

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

    def _insert_run(self, conn: sa.Connection, row: dict) -> None:
        values = {c: self._encode(c, v) for c, v in row.items()}
        values.update(_derived(row.get("extra")))
        if conn.dialect.name == "sqlite":  # PostgreSQL numbers it itself (an identity column)
            values["seq"] = sa.select(sa.func.coalesce(sa.func.max(T.runs.c.seq), 0) + 1).scalar_subquery()
        conn.execute(T.runs.insert().values(**values))

    @staticmethod
    def _sample_rows(run_id: str, samples: Iterable[Any], repeat: int) -> list[dict]:
        out = []
        for s in samples:
            kind = s.point_kind
            if kind not in POINT_KINDS:
                raise ValueError(f"point_kind must be one of {POINT_KINDS}, not {kind!r}")
            value = float(s.value)
            if not math.isfinite(value):
                raise ValueError(f"sample {s.metric} at {kind} {s.point}: value {value} is not finite")
            rep = getattr(s, "repeat", None)
            out.append({"run_id": run_id, "metric": s.metric, "value": value, "unit": s.unit,
                        "point": int(s.point), "point_kind": kind, "repeat": int(repeat if rep is None else rep)})
        return out

    def _insert_samples(self, conn: sa.Connection, run_id: str, samples: Iterable[Any], repeat: int | None) -> int:
        if repeat is None:
            repeat = conn.execute(sa.select(T.runs.c.repeat).where(T.runs.c.run_id == run_id)).scalar()
            if repeat is None:
                raise PatchbenchError(f"results store: no run {run_id}")
        rows = self._sample_rows(run_id, samples, repeat)
        if rows:
            conn.execute(T.samples.insert(), rows)
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

    def add_samples(self, run_id: str, samples: Iterable[Any], *, repeat: int | None = None, **fields_: Any) -> int:
        """Add samples to a run in one transaction; `repeat` defaults to the run's repeat index
        (a sample object with its own `repeat` attribute keeps it), with `fields_` (extra, log_paths,
        ...) set in the same transaction, the status unchanged. Returns how many were added."""
        samples, values = list(samples), {c: self._encode(c, v) for c, v in fields_.items() if c in RUN_FIELDS}
        with self._tx() as conn:
            if values:
                conn.execute(T.runs.update().where(T.runs.c.run_id == run_id).values(**values))
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
        r = T.runs.c
        with self._tx() as conn:
            old = conn.execute(sa.select(r.bench_driver, r.bench_params).where(r.run_id == run_id)).fetchone()
            if old is None:
                raise PatchbenchError(f"results store: no run {run_id}")
            if rekey:
                upd["bench_key"] = bench_key(upd.get("bench_driver", old[0]), upd.get("bench_params", json.loads(old[1])))
            values = {c: self._encode(c, v) for c, v in upd.items()}
            if "extra" in upd:
                values.update(_derived(upd["extra"]))
            conn.execute(T.runs.update().where(r.run_id == run_id).values(**values))
            if samples:
                self._insert_samples(conn, run_id, samples, None)
            if "identity" not in upd:
                self._rekey_identity(conn, run_id)

    @staticmethod
    def _rekey_identity(conn: sa.Connection, run_id: str) -> None:
        """The identity from the run's fields as they are now stored (finish may set the machine)."""
        names = ("env_key", "bench_key", "server_argv", "env_vars", "recipe_resolved", "extra", "gpu_key")
        row = conn.execute(sa.select(*[T.runs.c[n] for n in names]).where(T.runs.c.run_id == run_id)).one()
        d = decode_json(dict(zip(names, row)))
        conn.execute(T.runs.update().where(T.runs.c.run_id == run_id).values(identity=identity_of(d)))

    def mark_interrupted(self, run_id: str, reason: str) -> bool:
        """Finish a run still `running` as `interrupted` with `reason` (the reaper, after its
        patchbench died). Returns False if the run had already finished."""
        r = T.runs.c
        with self._tx() as conn:  # a run killed after its benchmark (extra.incomplete) says what it kept
            extra = json.loads(conn.execute(sa.select(r.extra).where(r.run_id == run_id)).scalar() or "null") or {}
            reason += f"; {extra['incomplete']}" if isinstance(extra, dict) and extra.get("incomplete") else ""
            res = conn.execute(T.runs.update().where(r.run_id == run_id, r.status == "running")
                               .values(status="interrupted", error=reason, finished_at=_now()))
            return res.rowcount > 0

    def _imported_clause(self, file_sha256: str | None, rows_sha256: str | None):
        r, any_ = T.runs.c, []
        if file_sha256:
            any_.append(r.imported_file_sha256 == file_sha256)
        if rows_sha256:
            any_.append(r.imported_rows_sha256 == rows_sha256)
        return sa.or_(*any_) if any_ else sa.false()

    def record_run(self, fields_: dict, samples: Iterable[Any] = (), artifacts: Sequence[Any] = (), *,
                   complete: bool = False) -> str:
        """Insert a whole run (default status `ok`), its samples and the records of its kept files
        (`artifacts`, as add_artifacts takes them) in one transaction (import, or a driver that
        measures before it stores). Returns the run id.

        An imported run (`extra["imported"]` with content hashes) whose file or rows are already
        stored is not inserted: the id of the run stored before is returned (checked inside the
        same transaction, so two imports of one file at once store it once; on PostgreSQL the
        transaction holds an advisory lock on those hashes). `complete`: a stored row of the same run id
        that never finished with samples (running/interrupted, none stored or only the benchmark's kept
        early, `extra.incomplete`: the database went away mid-run) is replaced by this record (the one kept on the measuring disk)."""
        row = self._run_values(dict(fields_), status_default="ok")
        samples = list(samples)
        imported = (row.get("extra") or {}).get("imported") or {}
        f, rws = imported.get("file_sha256"), imported.get("rows_sha256")
        with self._tx() as conn:
            if f or rws:
                if conn.dialect.name == "postgresql":
                    for h in sorted({h for h in (f, rws) if h}):
                        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:h))"), {"h": h})
                before = conn.execute(sa.select(T.runs.c.run_id).where(self._imported_clause(f, rws))
                                      .order_by(T.runs.c.started_at, T.runs.c.seq).limit(1)).scalar()
                if before:
                    return before
            found = conn.execute(sa.select(T.runs.c.status, T.runs.c.extra).where(T.runs.c.run_id == row["run_id"])).first()
            if found and complete and found[0] in ("running", "interrupted") and samples and (
                    (json.loads(found[1] or "{}") or {}).get("incomplete") or not conn.execute(  # only the benchmark's kept so far
                    sa.select(T.samples.c.run_id).where(T.samples.c.run_id == row["run_id"]).limit(1)).first()):
                for t in (T.artifacts, T.samples, T.runs):
                    conn.execute(t.delete().where(t.c.run_id == row["run_id"]))
            elif found:
                raise RunExists(f"results store: run {row['run_id']} already exists")
            self._insert_run(conn, row)
            self._insert_samples(conn, row["run_id"], samples, int(row.get("repeat") or 0))
            if artifacts:
                conn.execute(T.artifacts.insert(), [{"run_id": row["run_id"], "name": x.name, "path": x.path,
                                                     "sha256": x.sha256, "size": x.size} for x in artifacts])
        return row["run_id"]

    def delete_runs(self, run_ids: Sequence[str]) -> int:
        """Delete runs, their samples and artifact records; returns how many runs went."""
        n = 0
        with self._tx() as conn:
            for chunk in _chunks(list(run_ids)):
                conn.execute(T.samples.delete().where(T.samples.c.run_id.in_(chunk)))
                conn.execute(T.artifacts.delete().where(T.artifacts.c.run_id.in_(chunk)))
                n += conn.execute(T.runs.delete().where(T.runs.c.run_id.in_(chunk))).rowcount
        return n

    def add_artifacts(self, artifacts: Sequence[Any]) -> None:
        """Record kept files (toolkit/results/artifacts.Artifact: run_id, name, path, sha256, size),
        replacing an earlier record of the same run and name, in one transaction."""
        a = T.artifacts.c
        with self._tx() as conn:
            for x in artifacts:
                conn.execute(T.artifacts.delete().where(a.run_id == x.run_id, a.name == x.name))
            if artifacts:
                conn.execute(T.artifacts.insert(), [{"run_id": x.run_id, "name": x.name, "path": x.path,
                                                     "sha256": x.sha256, "size": x.size} for x in artifacts])

    # -- reads ----------------------------------------------------------------------------------
    def artifacts(self, run_ids: Sequence[str]) -> list:
        """The kept files of `run_ids` as recorded (unchecked: toolkit/results/artifacts.check reads them)."""
        from toolkit.results.artifacts import Artifact

        a, out = T.artifacts.c, []
        with self._read() as conn:
            for chunk in _chunks(list(run_ids)):
                q = sa.select(a.run_id, a.name, a.path, a.sha256, a.size).where(a.run_id.in_(chunk))
                out += [Artifact(*row) for row in conn.execute(q.order_by(a.run_id, a.name))]
        return out

    def _decode(self, row: Sequence, shared: dict | None = None) -> RunRow:
        return decode_run(row, self.path, shared)

    def _select_runs(self, where, *, newest_first: bool = False, limit: int | None = None) -> list[RunRow]:
        r = T.runs.c
        order = ([r.started_at.desc().nulls_last(), r.seq.desc()] if newest_first
                 else [r.started_at.asc().nulls_first(), r.seq.asc()])
        q = sa.select(*_RUN_COLS).where(*where).order_by(*order)
        if limit is not None:
            q = q.limit(int(limit))
        shared: dict = {}
        with self._read() as conn:
            return [self._decode(row, shared) for row in conn.execute(q)]

    def runs(self, recipe: str | Sequence[str] | None = None, status: str | Sequence[str] | None = None,
             env_key: str | None = None, *, group_id: str | None = None, bench_key: str | None = None,
             gpu_key: str | None = None, run_ids: Sequence[str] | None = None,
             identity: str | Sequence[str] | None = None,
             config_verified: bool | None = None, limit: int | None = None,
             newest_first: bool = False) -> list[RunRow]:
        """Runs matching every filter given (a list means any of), oldest first by default."""
        where = []
        r = T.runs.c
        for col, value in (("recipe", recipe), ("status", status), ("env_key", env_key), ("group_id", group_id),
                           ("bench_key", bench_key), ("gpu_key", gpu_key), ("identity", identity),
                           ("run_id", None if run_ids is None else list(run_ids))):
            if value is None:
                continue
            vals = [value] if isinstance(value, str) else list(value)
            where.append(r[col].in_(vals) if vals else sa.false())
        if config_verified is not None:
            where.append(r.config_verified == 1 if config_verified
                         else sa.or_(r.config_verified.is_(None), r.config_verified == 0))
        return self._select_runs(where, newest_first=newest_first, limit=limit)

    def tracked_runs(self, recipe: str) -> list[RunRow]:
        """Runs `patchbench track` measured for `recipe` (`extra.track.recipe`), oldest first."""
        return self._select_runs([T.runs.c.track_recipe == recipe])

    def get_run(self, run_id: str) -> RunRow:
        """The run whose id is `run_id` or starts with it (unique prefix, as git abbreviates)."""
        q = sa.select(*_RUN_COLS).where(T.runs.c.run_id.startswith(run_id, autoescape=True)).limit(2)
        with self._read() as conn:
            rows = conn.execute(q).fetchall()
        if not rows:
            raise BadInput(f"no run {run_id} in {self.path}")
        if len(rows) > 1:
            exact = [row for row in rows if row[0] == run_id]
            if not exact:
                raise BadInput(f"run id prefix {run_id} is ambiguous", hint="give more characters")
            rows = exact
        return self._decode(rows[0])

    def measured_metrics(self, run_ids: Sequence[str]) -> dict[str, set[str]]:
        """run id -> the metrics it has samples of (runs without samples are absent)."""
        out: dict[str, set[str]] = {}
        s = T.samples.c
        with self._read() as conn:
            for chunk in _chunks(list(run_ids)):
                for rid, metric in conn.execute(sa.select(s.run_id, s.metric).distinct().where(s.run_id.in_(chunk))):
                    out.setdefault(rid, set()).add(metric)
        return out

    def samples(self, run_ids: Sequence[str] | str, metric: str | Sequence[str] | None = None) -> list[SampleRow]:
        """Samples of the given runs (optionally only some metrics), in insertion order."""
        ids = [run_ids] if isinstance(run_ids, str) else list(run_ids)
        metrics = None if metric is None else ([metric] if isinstance(metric, str) else list(metric))
        s = T.samples.c
        out: list[SampleRow] = []
        with self._read() as conn:
            for chunk in _chunks(ids):
                q = sa.select(*_SAMPLE_COLS).where(s.run_id.in_(chunk))
                if metrics is not None:
                    q = q.where(s.metric.in_(metrics))
                out.extend(SampleRow(*row) for row in conn.execute(q.order_by(s.id)))
        return out

    def recipe_names(self) -> list[str]:
        """Every recipe (or variant label) with at least one stored run."""
        with self._read() as conn:
            return list(conn.execute(sa.select(T.runs.c.recipe).distinct().order_by(T.runs.c.recipe)).scalars())

    def counts(self) -> dict[str, int]:
        """Number of runs per stored status (for `patchbench results` summaries)."""
        r = T.runs.c
        with self._read() as conn:
            return {st: n for st, n in conn.execute(sa.select(r.status, sa.func.count()).group_by(r.status))}

    def imported_runs(self, *, file_sha256: str | None = None, rows_sha256: str | None = None) -> list[RunRow]:
        """Runs imported from a file with this content hash (of the file's bytes, or of its rows)."""
        return self._select_runs([self._imported_clause(file_sha256, rows_sha256)])


def _chunks(items: list, size: int = 500) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
