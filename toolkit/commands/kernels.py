"""`patchbench kernels RECIPE --op OP`: a kernel table on the model's own shapes, measured inside the
recipe's env (its FlashInfer, its patches), each shape timed with a cold L2 and checked against an
fp32 reference; `--list` shows the stored tables, `--export DIR` writes flashinfer-bench traces.
Without a GPU a GPU op stops with exit 3 after checking that the env has it."""

from __future__ import annotations

from toolkit.commands.common import console, err, home_of, load, print_json, recipe_arg

HELP = "time and check one kernel op (FP4 GEMM, FP4 MoE) per shape inside a recipe's env"


def _ints(text: str) -> tuple[int, ...]:
    import argparse

    try:
        values = tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad list {text!r}: use e.g. 1,16,128") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"bad list {text!r}: positive integers, e.g. 1,16,128")
    return values


def add_arguments(parser) -> None:
    from toolkit.kernels.registry import OPS

    recipe_arg(parser)
    parser.add_argument("--op", required=True, help=f"the op: {', '.join(OPS)}")
    parser.add_argument("--backend", action="append", default=None,
                        help="backend(s) of the op (default: every one the env offers on this GPU)")
    parser.add_argument("--shapes", default="model",
                        help="`model` (decode shapes from the recipe's [roofline] model, TP/EP and benchmark "
                             "points; default), a JSONL of shapes, or a FlashInfer trace dump (FLASHINFER_TRACE_DUMP=1)")
    parser.add_argument("--m", type=_ints, default=None, help="only these M values (and the M values of a trace dump)")
    parser.add_argument("--trials", type=int, default=5, help="trials per shape (default 5; each is one observation)")
    parser.add_argument("--iters", type=int, default=50, help="timed calls per trial (default 50)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed calls first (default 10)")
    parser.add_argument("--flush-mb", type=float, default=None, help="L2 flush buffer in MiB (default: 2x the GPU's L2)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None, help="run a test op on this device")
    tune = parser.add_mutually_exclusive_group()
    tune.add_argument("--no-autotune", action="store_true",
                      help="FlashInfer's default tactics (default: tuned where the recipe's sglang tunes them: "
                           "0.5.23 does, 0.5.10 only for the trtllm/mxfp4 MoE runners)")
    tune.add_argument("--autotune", action="store_true",
                      help="tune FlashInfer's tactics even where the recipe's sglang would not")
    parser.add_argument("--no-cuda-graph", action="store_true",
                        help="time eager calls (the Python wrapper's dispatch included) instead of graph replays")
    parser.add_argument("--other-runner", action="store_true",
                        help="time a MoE op even when the recipe's server runs another MoE runner (labelled so); "
                             "default: refused")
    parser.add_argument("--frozen", action="store_true", help="refuse drift from the recipe's lock file")
    parser.add_argument("--list", action="store_true", help="show the stored tables of the recipe, measure nothing")
    parser.add_argument("--export", metavar="DIR", default=None,
                        help="write the stored tables (newest per backend) as flashinfer-bench traces into DIR")
    parser.add_argument("--json", action="store_true")


def run(args) -> int:
    from toolkit.errors import BadInput
    from toolkit.kernels import records
    from toolkit.kernels.registry import get_op
    from toolkit.kernels.table import rows

    op = get_op(args.op)
    home = home_of(args)
    recipe = load(args.recipe)
    if args.list or args.export:
        recs = records.latest(home, recipe.name, op.name, (args.backend or [None])[0])
        if not recs:
            raise BadInput(f"no stored {op.name} table for {recipe.name}",
                           hint=f"measure first: patchbench kernels {recipe.name} --op {op.name}")
        if args.export:
            from toolkit.kernels.export import export

            out = export(recs, args.export)
            if args.json:
                print_json(out)
            else:
                console.print(f"wrote {out['definitions']} definition(s), {out['solutions']} solution(s), "
                              f"{out['traces']} trace(s) to {out['dir']}")
            return 0
        _show(recs, args.json)
        return 0
    if min(args.trials, args.iters) < 1 or args.warmup < 0:
        raise BadInput("--trials and --iters must be >= 1, --warmup >= 0")
    from toolkit.kernels.bench import run_kernels
    from toolkit.kernels.measure import Settings
    from toolkit.kernels.shapes import resolve_shapes

    shapes = resolve_shapes(args.shapes, recipe, op, args.m)  # a bad --shapes fails before anything is built
    settings = Settings(warmup=args.warmup, iters=args.iters, trials=args.trials, flush_mb=args.flush_mb,
                        device=args.device, autotune=not args.no_autotune, cuda_graph=not args.no_cuda_graph)
    result = run_kernels(recipe, op, shapes, home=home, shapes_from=args.shapes, backends=args.backend,
                         settings=settings, frozen=args.frozen, console=err,
                         follow_server=not (args.autotune or args.no_autotune), ms=args.m,
                         other_runner=args.other_runner)
    _show(result.records, args.json)
    bad = [r for rec in result.records for r in rows(rec) if r.verdict != "ok"]
    for r in bad:
        err.print(f"[red]{r.label} {r.dims}: {r.verdict}[/] {r.error[:200]}")
    return 1 if bad else 0


def _show(recs: list[dict], as_json: bool) -> None:
    from toolkit.kernels.table import render_rows, rows

    if as_json:
        print_json({"tables": [{"recipe": r["recipe"], "op": r["op"], "backend": r.get("backend"),
                                "env_key": r.get("env_key"), "path": r.get("_path"), "probe": r.get("probe"),
                                "shapes_from": r.get("shapes_from"), "shapes_basis": r.get("shapes_basis"),
                                "server_runner": r.get("server_runner"),
                                "rows": [x.to_dict() for x in rows(r)]} for r in recs]})
        return
    for rec in recs:
        console.print(render_rows(rec))
        if rec.get("shapes_basis"):
            console.print(f"model shapes at {rec['shapes_basis']}", markup=False, highlight=False)
        console.print(f"[dim]stored: {rec.get('_path')}; efficiency = roofline floor (max(bytes / memory "
                      "bandwidth, FLOPs / peak), toolkit/data/gpus.toml) / measured median[/]")
