"""A stored run's row as a RunRow (pure): its JSON columns parsed, their defaults filled in, and a
row whose JSON was edited or damaged named in one line (StoreCorrupt), never a traceback in every
command that lists runs."""

from __future__ import annotations

import json
from typing import Sequence

from toolkit.errors import PatchbenchError
from toolkit.results.migrations.legacy import JSON_DEFAULTS, JSON_FIELDS, decode_json
from toolkit.results.records import RUN_FIELDS, RunRow


class StoreCorrupt(PatchbenchError):
    """A stored run's row does not decode (a JSON column edited or damaged)."""


def decode_run(row: Sequence, where: object, shared: dict | None = None) -> RunRow:
    """The RunRow of a `runs` row (columns in RUN_FIELDS order) of the store at `where`; `shared`:
    decode_json's per-listing cache."""
    raw = dict(zip(RUN_FIELDS, row, strict=True))
    try:
        d = decode_json(dict(raw), shared)
    except ValueError:
        bad = next((k for k in JSON_FIELDS if raw.get(k) and not _is_json(raw[k])), "a JSON field")
        raise StoreCorrupt(f"run {str(raw.get('run_id'))[:8]} in {where}: its `{bad}` is not valid JSON (the row was "
                           "edited or damaged)",
                           hint="restore the store from a backup, or repair that row (the other runs are intact)") \
            from None
    for k in JSON_FIELDS:
        d.setdefault(k, JSON_DEFAULTS[k]())
    if d.get("config_verified") is not None:
        d["config_verified"] = bool(d["config_verified"])
    return RunRow(**d)


def _is_json(text) -> bool:
    try:
        json.loads(text)
        return True
    except (TypeError, ValueError):
        return False
