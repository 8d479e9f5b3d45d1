"""Kernel tables on disk: one JSON file per measurement (recipe x op x backend), under
`$PATCHBENCH_HOME/kernels/<recipe>/<UTC time>-<id>-<op>-<backend>.json` (a `/` in a recipe name is
`__`). Files, not rows of the results store: a kernel table has its own shape (shapes x trials x
iterations, correctness per shape) and nothing in run selection reads it; the newest file per
(recipe, op, backend) is the one shown, older ones stay as history; which ones are compared with
each other is toolkit/kernels/pairing.py's rule (same GPU key and trial settings).

A record: `schema_version`, `id`, `created`, `recipe`, `recipe_resolved`, `env_key`, `tree_hashes`,
`arch_list`, `op`, `backend`, `settings`, `shapes_from`, `machine`, `probe` (versions, device, GPU,
capability, flush bytes) and `results` (per shape: dims, label, points, times_ms per trial,
flushes, correctness). docs/JSON.md documents the fields.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from pathlib import Path

RECORD_VERSION = 1


def kernels_dir(home: Path) -> Path:
    return Path(home) / "kernels"


def _slug(recipe: str) -> str:
    return recipe.replace("/", "__")


def _safe(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in text)


def save(home: Path, record: dict) -> Path:
    record = {"schema_version": RECORD_VERSION, "id": uuid.uuid4().hex[:12],
              "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), **record}
    d = kernels_dir(home) / _slug(record["recipe"])
    d.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    path = d / f"{stamp}-{record['id']}-{_safe(record['op'])}-{_safe(str(record.get('backend')))}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str))
    tmp.replace(path)
    return path


def load_all(home: Path, recipe: str) -> list[dict]:
    """Every record of `recipe`, oldest first."""
    d = kernels_dir(home) / _slug(recipe)
    out = []
    for p in sorted(d.glob("*.json")):
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        rec["_path"] = str(p)
        out.append(rec)
    return out


def latest(home: Path, recipe: str, op: str | None = None, backend: str | None = None) -> list[dict]:
    """The newest record per (op, backend) of `recipe`, filtered by op / backend when given."""
    newest: dict[tuple, dict] = {}
    for rec in load_all(home, recipe):
        if (op and rec["op"] != op) or (backend and rec.get("backend") != backend):
            continue
        newest[(rec["op"], rec.get("backend"))] = rec
    return [newest[k] for k in sorted(newest, key=lambda k: (k[0], str(k[1])))]


def of_op(home: Path, recipe: str, op: str, backend: str | None) -> list[dict]:
    """Every record of `recipe` for this op and backend, oldest first (toolkit.kernels.pairing picks
    the one to compare)."""
    return [r for r in load_all(home, recipe) if r["op"] == op and r.get("backend") == backend]


def recipes(home: Path) -> list[str]:
    d = kernels_dir(home)
    return sorted(p.name.replace("__", "/") for p in d.iterdir() if p.is_dir()) if d.is_dir() else []
