"""Make tests/data/schema3-demo.sqlite: a store as patchbench at schema 3 (before Alembic) leaves it,
written by its own pipeline. Run with that release's code first on the path, e.g.

    PYTHONPATH=/path/to/patchbench-at-schema-3 python tests/data/make_schema3_store.py OUT.sqlite

It copies the demo recipes into a scratch project, makes their benchmarks small, runs
`patchbench run demo/baseline demo/fast` (2 repeats each) into OUT, then records one run the way
`track` does (extra.track) and imports one external result file (extra.imported, with its hashes),
so the migration's derived columns have something to carry over.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SMALL = ('driver = "serving"\ninput_len = 16\noutput_len = 8\nconcurrency = [1]\nnum_prompts = 3\nwarmup = 1\n'
         'repeats = 2\n')


def main(out: Path) -> None:
    from toolkit.cli import main as cli
    from toolkit.results.store import SCHEMA_VERSION, Store

    assert SCHEMA_VERSION == 3, f"this is patchbench at schema {SCHEMA_VERSION}, not 3"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for part in ("upstream/minisglang", "patches/demo", "recipes/demo"):
            shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info",
                                                                                    "build", "*.lock.json"))
        base = root / "recipes" / "demo" / "baseline.toml"
        head, rest = base.read_text().split("[benchmark]", 1)
        base.write_text(head + "[benchmark]\n" + SMALL + rest[rest.index("\n[", 1):])
        os.environ.update(PATCHBENCH_RECIPES=str(root / "recipes"), PATCHBENCH_HOME=str(root / "home"))
        out.unlink(missing_ok=True)
        assert cli(["run", "demo/baseline", "demo/fast", "--store", str(out)]) == 0
        store = Store(out)
        store.record_run({"recipe": "demo/update@0.1.0", "status": "failed", "error": "stack does not apply",
                          "extra": {"track": {"recipe": "demo/update", "point": {"id": "0.1.0"}}}})
        ext = root / "external.jsonl"
        ext.write_text(json.dumps({"backend": "sglang", "dataset_name": "random", "max_concurrency": 1,
                                   "random_input_len": 16, "random_output_len": 8, "completed": 3,
                                   "output_throughput": 12.5, "median_itl_ms": 30.0}) + "\n")
        assert cli(["import", str(ext), "--recipe", "elsewhere", "--store", str(out)]) == 0
        store.close()
    for suffix in ("-wal", "-shm"):
        Path(str(out) + suffix).unlink(missing_ok=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
