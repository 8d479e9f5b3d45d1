"""`patchbench import FILE --recipe NAME`: store sglang bench_serving / bench_one_batch JSONL."""

from __future__ import annotations

from pathlib import Path

from toolkit.commands.common import console, store_of
from toolkit.errors import BadInput

HELP = "import sglang bench_serving / bench_one_batch JSONL (or a patchbench JSON export) into the store"


def add_arguments(parser) -> None:
    parser.add_argument("file", help="JSONL from sglang.bench_serving / bench_one_batch, or a patchbench JSON export")
    parser.add_argument("--recipe", help="recipe name to file the results under (JSONL only)")
    parser.add_argument("--format", choices=["auto", "bench-serving", "one-batch", "patchbench"], default="auto")
    parser.add_argument("--gpu", default="unknown", help="GPU description of the machine that produced them")
    parser.add_argument("--own", action="store_true",
                        help="a patchbench export of this team's own runs (a SQLite store moved into the team's "
                             "PostgreSQL): counted as runs stored directly, not as imported (measured elsewhere); "
                             "runs an earlier import of the file marked imported lose the mark")


def _detect(path: Path, rows: list) -> str:
    if path.suffix == ".json":
        return "patchbench"
    if not rows:
        raise BadInput(f"{path}: no JSON rows")
    if "median_decode_throughput" in rows[0] or "batch_size" in rows[0]:
        return "one-batch"
    if "output_throughput" in rows[0] or "max_concurrency" in rows[0]:
        return "bench-serving"
    raise BadInput(f"{path}: neither bench_serving nor bench_one_batch rows (keys: {', '.join(list(rows[0])[:6])})")


def _not_an_export(path: Path) -> None:
    """BadInput for the exports that are not for importing: HUD's JSON list, the CSV table."""
    from toolkit.results.exchange import CSV_COLUMNS

    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.read(200).lstrip()
    except OSError:
        return
    if head.startswith("["):
        raise BadInput(f"{path}: a JSON list (a `results --export hud` file, for PyTorch HUD): not importable",
                       hint="import a `patchbench results --export json` file, or sglang bench_serving JSONL")
    if head.startswith(",".join(CSV_COLUMNS[:3])):
        raise BadInput(f"{path}: a CSV table (a `results --export csv` file): not importable",
                       hint="import a `patchbench results --export json` file, or sglang bench_serving JSONL")


def run(args) -> int:
    from toolkit.run.bench.one_batch import one_batch_shapes, parse_one_batch_rows
    from toolkit.run.bench.sglang_jsonl import bench_serving_workload, parse_bench_serving_rows, read_jsonl
    from toolkit.results.exchange import already_imported, content_hashes, import_export

    path = Path(args.file)
    if not path.is_file():
        raise BadInput(f"{path} is a directory: give the results file" if path.is_dir() else f"{path} does not exist")
    store = store_of(args)
    if args.format == "patchbench" or (args.format == "auto" and path.suffix == ".json"):
        n = import_export(store, path, measured_here=args.own)
        if args.own:
            console.print(f"imported {n} runs from {path} as this store's own (counted as runs stored directly)"
                          + ("" if n else " (it holds no run this store does not have)"))
        else:
            console.print(f"imported {n} runs from {path}" + (
                " as measured elsewhere: compare, history and report count them only with --imported (this "
                "team's own runs moved from another store: `import --own` counts them as stored directly)" if n
                else " (it holds no run this store does not have)"))
        return 0
    if args.own:
        raise BadInput(f"{path}: --own is for a patchbench export (`results --export json`), not sglang JSONL",
                       hint="JSONL was measured outside patchbench: its config was never verified")
    _not_an_export(path)
    rows = read_jsonl(path)
    fmt = _detect(path, rows) if args.format == "auto" else args.format
    if not args.recipe:
        raise BadInput("--recipe NAME is required to import JSONL")
    hashes = content_hashes(path, rows)
    before = already_imported(store, hashes)
    if before:
        r = before[0]
        console.print(f"{path} already imported as run {r.run_id[:8]} of {r.recipe} "
                      f"({(r.started_at or '')[:19]}); nothing stored")
        return 0
    if fmt == "one-batch":
        samples = parse_one_batch_rows(rows)
        shapes = one_batch_shapes(path)
        params = {"driver": "one-batch", "input_len": shapes[0][0] if shapes else None,
                  "output_len": shapes[0][1] if shapes else None,
                  "points": sorted({s.point for s in samples})}
    else:
        samples = parse_bench_serving_rows(rows)
        params = {"driver": "serving", **bench_serving_workload(rows[0]),
                  "points": sorted({s.point for s in samples})}
    run_id = store.record_run({  # stores nothing if the same file got in meanwhile (same transaction)
        "recipe": args.recipe,
        "bench_driver": params["driver"],
        "bench_params": params,
        "machine": {"gpu_key": args.gpu, "imported_from": str(path.resolve())},
        "config_verified": False,
        "verification": [f"imported from {path.name}: effective config not verified by patchbench"],
        "log_paths": {"imported": str(path.resolve())},
        "extra": {"imported": {"from": str(path.resolve()), **hashes}},
    }, samples)
    console.print(f"imported {len(samples)} samples from {path} as run {run_id[:8]} of {args.recipe} "
                  f"(measured elsewhere, config not verified: compare it with --imported)")
    return 0
