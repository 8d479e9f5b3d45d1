"""sglang's JSONL result files: reading them, and the importer of `bench_serving` rows.

Field names map to patchbench's metrics through the registry's aliases (`toolkit.results.metrics`), so
imported and measured numbers compare. The importer of `bench_one_batch` rows is in one_batch.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable

from toolkit.run.bench import Sample
from toolkit.errors import BadInput
from toolkit.results.metrics import aliases


def read_jsonl(source) -> list[dict]:
    """Rows of a JSONL file (a path) or JSONL text (a str containing a newline or '{')."""
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source
                                    and not source.lstrip().startswith("{")):
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise BadInput(f"cannot read {path}: {e.strerror or e}")
        except UnicodeDecodeError as e:
            raise BadInput(f"{path}: not UTF-8 text (byte {e.start}): bench_serving writes JSONL text") from None
        where = str(path)
    else:
        text, where = str(source), "<text>"
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise BadInput(f"{where}:{lineno}: not JSON: {e}")
        if not isinstance(row, dict):
            raise BadInput(f"{where}:{lineno}: a JSONL row must be an object")
        rows.append(row)
    return rows


def bench_serving_workload(row: dict) -> dict:
    """The workload a bench_serving row describes (to check it against a recipe)."""
    return {
        "backend": row.get("backend"),
        "dataset_name": row.get("dataset_name"),
        "input_len": row.get("random_input_len"),
        "output_len": row.get("random_output_len"),
        "range_ratio": row.get("random_range_ratio"),
        "max_concurrency": row.get("max_concurrency"),
        "request_rate": row.get("request_rate"),
    }


def parse_bench_serving_rows(rows: Iterable[dict]) -> list[Sample]:
    """Samples from sglang `bench_serving` result rows; point = max_concurrency (0 = unbounded)."""
    samples: list[Sample] = []
    for i, row in enumerate(rows, 1):
        if "output_throughput" not in row:
            raise BadInput(f"row {i} is not an sglang bench_serving result (no output_throughput)")
        point = row.get("max_concurrency") or 0
        if isinstance(point, bool) or not isinstance(point, int) or point < 0:
            raise BadInput(f"row {i}: max_concurrency must be a whole number >= 0 (0: unbounded), not {point!r}")
        for field_name, metric in aliases("concurrency").items():
            value = row.get(field_name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise BadInput(f"row {i}: {field_name} must be a number, not {value!r}")
            if isinstance(value, (int, float)):
                if isinstance(value, float) and math.isnan(value):
                    continue
                if value < 0 or math.isinf(value):
                    raise BadInput(f"row {i}: {field_name} = {value!r} cannot be measured (negative or infinite)")
                samples.append(Sample(metric.name, float(value) * metric.scale, metric.unit, point,
                                      "concurrency"))
    return samples


def parse_bench_serving_jsonl(source) -> list[Sample]:
    """Samples from an sglang `bench_serving` JSONL file (path) or text."""
    return parse_bench_serving_rows(read_jsonl(source))
