"""`patchbench profile RECIPE`: where the decode step goes, kernel family by kernel family."""

from __future__ import annotations

from toolkit.commands.common import console, err, home_of, load, print_json, recipe_arg, store_of

HELP = ("profile N decode steps of a recipe's server under a steady load (torch profiler via "
        "/start_profile): time per kernel family beside its roofline floor, and the step time vs the ITL")

EPILOG = """\
Recording starts once all --concurrency requests of the load have their first token (every step is then
a decode over all of them) and stops by itself after --steps forward steps (sglang's num_steps); a trace
with fewer decode steps than asked is stored INVALID as "short trace", with the counts.
The server writes the traces (Chrome JSON, gzipped, one per rank) under runs/<id>/profile/;
`patchbench results --export json` lists them in the run's log_paths. On a GPU box the env's
sglang must serve /start_profile (the fields sent are those its ProfileReq has; 0.5.23 takes all of them),
torch's CUDA profiler (CUPTI, shipped with the CUDA torch wheels) must be usable by the server's user
(NVreg_RestrictProfilingToAdminUsers=0, or run as root), and the recipe needs a [roofline] model and gpu for
the floors. `python benchmarks/profile_gpu.py` checks the path on a CUDA GPU in under 5 minutes. The demo recipes demo/torch-baseline and demo/torch-small-experts run
the miniature's torch step on CPU (their env installs torch)."""


def add_arguments(parser) -> None:
    recipe_arg(parser)
    parser.epilog = EPILOG
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight (decode batch), default 4")
    parser.add_argument("--steps", type=int, default=20, help="forward steps to record, default 20")
    parser.add_argument("--families", default=None, metavar="FILE",
                        help="extra kernel-family rules (TOML, same layout as toolkit/data/kernel_families.toml)")
    parser.add_argument("--frozen", action="store_true", help="refuse drift from the recipe's lock file")
    parser.add_argument("--strict-check", action="store_true",
                        help="an unresolved static check refuses the recipe (exit 2), as `[target] strict = true` does")
    parser.add_argument("--json", action="store_true")


def run(args) -> int:
    from rich.markup import escape

    from toolkit.errors import BadInput
    from toolkit.profile.families import load_families
    from toolkit.profile.floors import floor_spec
    from toolkit.profile.render import render
    from toolkit.profile.session import profile_recipe

    if args.concurrency < 1 or not 1 <= args.steps <= 10_000:
        raise BadInput("--concurrency must be >= 1 and --steps between 1 and 10000")
    recipe = load(args.recipe)
    families = load_families(args.families)
    result = profile_recipe(recipe, home=home_of(args), store=store_of(args), concurrency=args.concurrency,
                            steps=args.steps, families_file=args.families, frozen=args.frozen, console=err,
                            strict=args.strict_check)
    stored = store_of(args).get_run(result.run_id)
    spec = floor_spec(recipe.to_dict(), args.concurrency, stored.server_info)  # the layout sglang resolved
    if args.json:
        print_json({"run_id": result.run_id, "status": result.status, "error": result.error, **result.summary})
        return 0 if result.status == "ok" else 1
    if result.summary.get("ranks"):
        for item in render(recipe.name, families, result.summary, spec):
            console.print(item, markup=not isinstance(item, str))  # lines name [roofline] literally
        console.print(f"run {result.run_id[:8]}: traces {', '.join(result.summary['traces'])}", markup=False)
    if result.status != "ok":
        err.print(f"[red]{escape(recipe.name)}: profile run {result.run_id[:8]} stored INVALID:[/] {escape(result.error or '')}")
        return 1
    return 0
