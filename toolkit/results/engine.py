"""Where the store lives and how it is reached: a SQLite file (the default) or a PostgreSQL URL.

The location, first found wins: `--store` (a path or URL), `$PATCHBENCH_STORE`, the user config's
`[store] url` (toolkit/workspace.user_config_path: `$PATCHBENCH_HOME/config.toml`, else
`~/.config/patchbench/config.toml`), else `HOME/results.sqlite`. A URL `postgresql://...` is
reached through psycopg 3 (libpq), so its credentials come from where libpq looks: the URL,
`PGPASSFILE`, `~/.pgpass`, `PGPASSWORD`. A password is never shown: every message, log and export
names the store by `display(url)` (the password masked).

SQLite: WAL journal, `synchronous=FULL`, `busy_timeout`, every transaction `BEGIN IMMEDIATE`
(writers queue for the file instead of failing half-way). PostgreSQL: READ COMMITTED
transactions; readers never see a transaction that has not committed.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from toolkit.errors import BadInput, PatchbenchError

BUSY_TIMEOUT_MS = 60_000
STORE_FILENAME = "results.sqlite"
PG_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")


def is_url(text: str) -> bool:
    return "://" in str(text)


def display(location: str | os.PathLike) -> str:
    """The store's name for people: a path as it is, a URL with its password masked."""
    text = str(location)
    if not is_url(text):
        return text
    try:
        return make_url(text).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        return text.split("://", 1)[0] + "://***"


def mask_urls(text: str) -> str:
    """`text` with the password of every `scheme://user:password@host` in it masked."""
    import re

    return re.sub(r"(\w[\w+.-]*://[^:/@\s]*:)[^@\s]+@", r"\1***@", text)


@dataclass(frozen=True)
class StoreConfig:
    url: str | None = None  # [store] url
    artifacts: str | None = None  # [store] artifacts: a shared directory for run files
    source: str = "defaults"


def load_store_config(home: Path) -> StoreConfig:
    """The user config's `[store]` table (url, artifacts); unknown keys are a one-line error."""
    from toolkit.workspace import user_config_path

    path = user_config_path(home)
    if not path.is_file():
        return StoreConfig()
    try:
        table = tomllib.loads(path.read_text()).get("store", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"{path}: {exc}") from None
    if not isinstance(table, dict):
        raise BadInput(f"{path}: [store] must be a table (url = \"...\", artifacts = \"...\")")
    unknown = set(table) - {"url", "artifacts"}
    if unknown:
        raise BadInput(f"{path}: unknown [store] key(s) {', '.join(sorted(unknown))} (known: artifacts, url)")
    for key in ("url", "artifacts"):
        if key in table and not isinstance(table[key], str):
            raise BadInput(f"{path}: [store] {key} must be a string (a path or a database URL), not {table[key]!r}")
    return StoreConfig(table.get("url"), table.get("artifacts"), str(path))


def store_location(home: Path, arg: str | None = None) -> str | Path:
    """The store to use (see the module doc): a URL string or a resolved SQLite path."""
    for text in (arg, os.environ.get("PATCHBENCH_STORE"), load_store_config(home).url):
        if text:
            return str(text) if is_url(text) else Path(text).expanduser().resolve()
    return home / STORE_FILENAME


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    dbapi_conn.isolation_level = None  # the driver's own BEGIN off: the `begin` event issues one
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    mode = cur.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise PatchbenchError(f"cannot use WAL journal (got {mode})")
    cur.execute("PRAGMA synchronous = FULL")
    cur.execute("PRAGMA foreign_keys = ON")
    cur.close()


def _sqlite_begin(conn) -> None:
    """A write transaction takes the file's write lock at once (waiting up to busy_timeout), so it
    never fails half-way on a lock upgrade; a read is a deferred one (a WAL snapshot)."""
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("patchbench_write") else "BEGIN")


def make_engine(location: str | Path) -> sa.Engine:
    """An engine for a SQLite path or a PostgreSQL URL (one connection kept per process)."""
    if not is_url(str(location)):
        path = Path(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(f"sqlite:///{path}", poolclass=sa.pool.SingletonThreadPool,
                                  connect_args={"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False})
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        sa.event.listen(engine, "begin", _sqlite_begin)
        return engine
    try:
        url = make_url(str(location))
        url.port  # noqa: B018 (a port that is not a number raises here, not at connect)
    except (sa.exc.ArgumentError, ValueError):
        raise BadInput(f"results store {display(location)}: not a database URL "
                       "(postgresql://USER@HOST:PORT/DATABASE, or a SQLite path)") from None
    if url.drivername not in PG_SCHEMES:
        raise BadInput(f"results store {display(location)}: only sqlite paths and postgresql:// URLs are supported")
    url = url.set(drivername="postgresql+psycopg")
    return sa.create_engine(url, pool_size=1, max_overflow=2, pool_pre_ping=True,
                            connect_args={"connect_timeout": 10, "application_name": "patchbench"})


def connection_hint(message: str) -> str:
    """What to check when a PostgreSQL connection failed with `message` (its first line)."""
    m = message.lower()
    if "password" in m or "authentication" in m:
        return "check the password: ~/.pgpass (or PGPASSFILE) with a line for this host:port:database:user, or PGPASSWORD"
    if "database" in m and "does not exist" in m:
        return "create it (`createdb DATABASE`, as a user allowed to) or fix the URL's database name"
    if "ssl" in m:
        return "the server and the URL's sslmode disagree (drop ?sslmode=require, or enable SSL on the server)"
    if "role" in m and "does not exist" in m:
        return "create the role (`createuser USER`) or fix the URL's user"
    return "is the database server up? `pg_isready -h HOST -p PORT`"


def is_disconnect(exc: BaseException) -> bool:
    """The database went away (server stopped, network cut): not a fault of the statement."""
    return bool(getattr(exc, "connection_invalidated", False)) or isinstance(exc, sa.exc.InterfaceError)
