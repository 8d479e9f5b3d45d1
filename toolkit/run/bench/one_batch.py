"""sglang's static-batch decode benchmark: the command line, and its JSONL rows as Samples.

sglang ships the benchmark as `python -m sglang.bench_one_batch` up to 0.5.22 and as
`python -m sglang.benchmark.one_batch` from 0.5.23 on; forks keep either, whatever version they
report, so `find_one_batch_module` asks the env which one exists. It takes every server flag plus
`--batch-size B... --input-len N --output-len N --result-filename F [--run-name X]`, and appends
one JSON row per (batch_size, input_len, output_len):

    {"run_name", "batch_size", "input_len", "output_len", "prefill_latency" (s),
     "prefill_throughput" (tok/s), "median_decode_latency" (s), "median_decode_throughput" (tok/s),
     "total_latency" (s), "overall_throughput" (tok/s)}

`parse_one_batch_jsonl` turns those rows into Samples at point = batch_size (point_kind "batch");
`patchbench import` uses it for bench_one_batch files too. The importer of sglang `bench_serving`
JSONL lives in sglang_jsonl.py and is re-exported here; field names map to metrics in toolkit.results.metrics.
"""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from toolkit.run import scratch as scratch_dir, supervisor
from toolkit.run.bench import Sample
from toolkit.run.bench.sglang_jsonl import (  # noqa: F401  (re-exported importers)
    parse_bench_serving_jsonl,
    parse_bench_serving_rows,
    read_jsonl,
)
from toolkit.errors import BadInput, PatchbenchError
from toolkit.results.metrics import aliases
from toolkit.run.server import log_tail
from toolkit.run.env_module import first_module

# The names sglang has shipped the benchmark under, newest first (renamed in 0.5.23).
ONE_BATCH_MODULES = ("sglang.benchmark.one_batch", "sglang.bench_one_batch")


def find_one_batch_module(python: str | Path, environ: dict | None = None) -> str:
    """The static-batch benchmark module that exists in the env of `python` (never chosen by
    version number: a fork may report 0.5.23 and keep `sglang.bench_one_batch`)."""
    module = first_module(python, ONE_BATCH_MODULES, environ)
    if module is None:
        raise PatchbenchError(f"the env has no static-batch benchmark (looked for {', '.join(ONE_BATCH_MODULES)})",
                              hint=f"{python} -m sglang.bench_one_batch must exist for driver = \"one-batch\"")
    return module


def one_batch_argv(*, python: str, module: str, batch_sizes: Sequence[int],
                   input_len: int, output_len: int, result_filename: str,
                   model_path: Optional[str] = None, run_name: Optional[str] = None,
                   server_argv: Sequence[str] = ()) -> list[str]:
    """argv for one static-batch sweep: `python -m <module> [server flags] <bench flags>`.

    `server_argv` holds server flags (from the recipe: --tp-size, --ep-size, ...); the benchmark
    accepts them all. `model_path` adds --model-path unless server_argv already names one.
    sglang 0.5.23 prompts with random ids below 10,000 (its warmup always does, whatever
    --prompt-filename says): the model's vocab must be at least that large.
    """
    if not batch_sizes or any(int(b) < 1 for b in batch_sizes):
        raise BadInput(f"batch sizes must be ints >= 1: {list(batch_sizes)!r}")
    if input_len < 1 or output_len < 1:
        raise BadInput("input_len and output_len must be >= 1")
    server_argv = [str(a) for a in server_argv]
    has_model = any(a in ("--model-path", "--model") or a.startswith(("--model-path=", "--model="))
                    for a in server_argv)
    argv = [python, "-m", module]
    if model_path is not None and not has_model:
        argv += ["--model-path", str(model_path)]
    elif model_path is None and not has_model:
        raise BadInput("the static-batch benchmark needs --model-path")
    argv += server_argv
    argv += ["--batch-size", *[str(int(b)) for b in batch_sizes],
             "--input-len", str(int(input_len)), "--output-len", str(int(output_len)),
             "--result-filename", str(result_filename)]
    if run_name:
        argv += ["--run-name", run_name]
    return argv


class OneBatchFailed(PatchbenchError):
    """The static-batch benchmark exited non-zero or timed out; carries the last lines of its log."""

    def __init__(self, message: str, *, log: Path, tail: str):
        super().__init__(message, log=log)
        self.tail = tail


def run_one_batch(argv: list[str], *, log: Path, environ: dict, timeout_s: float,
                  started: Callable[[subprocess.Popen], None] = lambda proc: None, scratch: Path | None = None) -> None:
    """Run the benchmark in its own supervised process group (ended if patchbench dies), output
    appended to `log`; `started(proc)` is called once it runs (proc.pid is its group). On a timeout the
    whole group is killed; `scratch` (the launch's temporary files, toolkit.run.scratch) is removed after
    it. Raises OneBatchFailed with the last lines of the log on failure."""
    if scratch is not None:
        scratch_dir.prepare(scratch, environ)
    proc = supervisor.spawn(argv, log=log, environ=environ, scratch=scratch)
    try:
        started(proc)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            supervisor.stop_group(proc, grace=5.0)
            raise OneBatchFailed(f"one-batch benchmark timed out after {timeout_s:.0f} s (its process group was "
                                 "killed)", log=log, tail=log_tail(log, lines=12)) from None
    finally:
        supervisor.stop_group(proc, grace=5.0)  # no process of the group outlives the benchmark
        scratch_dir.remove(scratch)
    if code != 0:
        tail = log_tail(log, lines=12)
        lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
        # the exception's own line when there is one (later lines may be exit-time noise)
        last = next((ln for ln in reversed(lines) if re.search(r"\w(Error|Exception)\b", ln)), lines[-1] if lines else "")
        raise OneBatchFailed(f"one-batch benchmark exited with code {code}" + (f": {last[:300]}" if last else ""),
                             log=log, tail=tail)


def parse_one_batch_rows(rows: Iterable[dict], *, input_len: Optional[int] = None,
                         output_len: Optional[int] = None,
                         run_name: Optional[str] = None) -> list[Sample]:
    """Samples from bench_one_batch rows, point = batch_size.

    Rows can be filtered by input_len / output_len / run_name. After filtering, all rows must share
    one (input_len, output_len) shape, since a Sample has no room for it (BadInput otherwise).
    Repeated rows for one batch size give repeated samples.
    """
    fields = aliases("batch")  # sglang field -> metric (name, unit, scale), from toolkit.results.metrics
    kept = []
    for i, row in enumerate(rows, 1):
        if "batch_size" not in row or not any(k in row for k in fields):
            raise BadInput(f"row {i} is not an sglang bench_one_batch result "
                           "(needs batch_size and latency/throughput fields)")
        if input_len is not None and row.get("input_len") != input_len:
            continue
        if output_len is not None and row.get("output_len") != output_len:
            continue
        if run_name is not None and row.get("run_name") != run_name:
            continue
        kept.append(row)
    shapes = sorted({(r.get("input_len"), r.get("output_len")) for r in kept}, key=str)
    if len(shapes) > 1:
        raise BadInput("bench_one_batch rows mix shapes (input_len, output_len) "
                       f"{shapes}: choose one with input_len/output_len")
    samples: list[Sample] = []
    for row in kept:
        point = int(row["batch_size"])
        seen = set()
        for field, metric in fields.items():
            value = row.get(field)
            if metric.name in seen or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if isinstance(value, float) and math.isnan(value):
                continue
            seen.add(metric.name)
            samples.append(Sample(metric.name, float(value) * metric.scale, metric.unit, point, "batch"))
    return samples


def parse_one_batch_jsonl(source, **filters) -> list[Sample]:
    """Samples from a bench_one_batch JSONL file (path) or text; see parse_one_batch_rows."""
    return parse_one_batch_rows(read_jsonl(source), **filters)


def missing_batch_sizes(samples: Iterable[Sample], batch_sizes: Sequence[int]) -> list[int]:
    """The batch sizes that produced no row: sglang skips a shape its KV pool cannot hold ("skipping
    (B, I, O) due to max batch size limit") and writes nothing for it."""
    seen = {s.point for s in samples}
    return [int(b) for b in batch_sizes if int(b) not in seen]


def one_batch_shapes(source) -> list[tuple]:
    """The distinct (input_len, output_len) shapes in a bench_one_batch JSONL file or text."""
    return sorted({(r.get("input_len"), r.get("output_len")) for r in read_jsonl(source)}, key=str)


__all__ = [
    "find_one_batch_module", "one_batch_argv", "run_one_batch", "OneBatchFailed", "parse_one_batch_rows", "parse_one_batch_jsonl",
    "one_batch_shapes", "missing_batch_sizes", "parse_bench_serving_jsonl", "parse_bench_serving_rows", "read_jsonl",
]
