"""The store's SQLite layout, one migration per version (toolkit/results/store.py applies them).

Append a migration for every change, never edit one: a store file records the version it has.
"""

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

# v2: the `interrupted` status. Loosening a CHECK changes no stored row, so the table definition is
# edited in place (the procedure SQLite documents for CHECK changes); samples keep their rows.
_ALLOW_INTERRUPTED = """
PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = replace(sql, '''invalid'')', '''invalid'', ''interrupted'')')
    WHERE type = 'table' AND name = 'runs' AND sql NOT LIKE '%''interrupted''%';
PRAGMA writable_schema = RESET
"""

# v3: the run identity (toolkit/results/identity.py). Stored runs get theirs from their own fields
# (`_backfill_identities`): UNKNOWN where those do not allow it, and such runs are never reused.
_ADD_IDENTITY = """
ALTER TABLE runs ADD COLUMN identity TEXT;
CREATE INDEX runs_identity ON runs (identity)
"""

# version -> SQL that brings version-1 to version. Append, never edit.
MIGRATIONS: dict[int, str] = {1: _SCHEMA_V1, 2: _ALLOW_INTERRUPTED, 3: _ADD_IDENTITY}
