"""`patchbench bisect RECIPE --metric NAME[@POINT]`: the first patch of the stack (or, with
--source/--good/--bad, the first upstream commit) that makes the metric worse than the base by more
than --threshold percent. Noise-aware (more repeats where a verdict is not yet significant), results
cached per env key (resumable), apply/build failures skipped."""

from __future__ import annotations

import shlex
import uuid

from toolkit.commands.common import console, err, home_of, load, print_json, store_of
from toolkit.executors.config import add_executor_arguments

HELP = "find the patch (or upstream commit) that made a metric worse, in about log2(n)+1 builds, noise-aware"


def add_arguments(parser) -> None:
    parser.add_argument("recipe", metavar="RECIPE")
    parser.add_argument("--metric", required=True, help="NAME[@POINT], e.g. output_tok_s@1")
    parser.add_argument("--threshold", type=float, default=5.0, help="percent worse than the base that counts as bad")
    parser.add_argument("--repeats", type=int, default=3, help="initial values per step")
    parser.add_argument("--max-repeats", type=int, default=8, help="bound on values per step when undecided")
    parser.add_argument("--source", help="bisect upstream commits of this git source instead of the stack")
    parser.add_argument("--good", help="with --source: a known-good revision")
    parser.add_argument("--bad", help="with --source: a known-bad revision")
    parser.add_argument("--json", action="store_true")
    add_executor_arguments(parser)


def run(args) -> int:
    from toolkit import stats
    from toolkit.analysis.bisect import bisect_items, bisect_stack
    from toolkit.analysis.variants import (MetricSpec, VariantMeter, patch_label, prefix_overrides, stack_of,
                                           upstream_commits)
    from toolkit.commands.attribute import require_gpu_if_needed
    from toolkit.errors import BadInput

    recipe = load(args.recipe)
    spec = MetricSpec.parse(args.metric)
    home = home_of(args)
    meter = VariantMeter(recipe, home, store_of(args), spec, err, group_id=uuid.uuid4().hex[:12])
    if args.executor == "slurm":  # each probe one Slurm job
        from toolkit.executors.config import cluster_config
        from toolkit.executors.slurm_variants import SlurmVariantMeter

        meter = SlurmVariantMeter(recipe, home, meter.store, spec, err, group_id=meter.group_id,
                                  cfg=cluster_config(args, home), command="bisect")
    unit = "tok/s" if "tok_s" in spec.metric else ("ms" if "_ms" in spec.metric else "")
    hib = stats.higher_is_better(spec.metric, unit)
    if hib is None:
        hib = True
    kw = dict(higher_is_better=hib, threshold_pct=args.threshold, initial_repeats=max(2, args.repeats),
              max_repeats=args.max_repeats, on_step=lambda s: err.print(s.line))
    repro = ["patchbench", "bisect", recipe.name, "--metric", args.metric, "--threshold", str(args.threshold)]
    if args.source:
        if not (args.good and args.bad):
            raise BadInput("--source needs --good REV and --bad REV")
        if args.executor == "local":  # a Slurm node has the GPU, not this machine
            require_gpu_if_needed(recipe)
        commits = upstream_commits(recipe, args.source, args.good, args.bad, home)
        err.print(f"bisecting {len(commits) - 1} commits of {args.source} ({args.good}..{args.bad})")

        def measure(k: int, r: int):
            return meter.measure(commits[k][:12], {args.source: {"rev": commits[k]}}, r)

        result = bisect_items([c[:12] for c in commits], measure, **kw)
        repro += ["--source", args.source, "--good", args.good, "--bad", args.bad]
    else:
        stack = stack_of(recipe)
        if not stack:
            raise BadInput(f"recipe {recipe.name} has no patches to bisect")
        if args.executor == "local":  # a Slurm node has the GPU, not this machine
            require_gpu_if_needed(recipe)
        names = [patch_label(recipe, p) for _, p in stack]
        err.print(f"bisecting {len(stack)} patches of {recipe.name}")

        def measure(k: int, r: int):
            return meter.measure(f"prefix{k}", prefix_overrides(recipe, k), r)

        result = bisect_stack(len(stack), measure, labels=names, **kw)
    if args.json:
        print_json({"recipe": recipe.name, "metric": spec.metric, "point": meter.point,
                    "culprit": result.culprit, "culprit_label": result.culprit_label,
                    "candidates": result.candidates, "confirmed": result.confirmed,
                    "good_values": result.good_values, "bad_values": result.bad_values,
                    "builds": meter.builds, "runs": meter.runs, "message": result.message,
                    "reproduce": shlex.join(repro)})
        return 0 if result.culprit is not None or result.candidates is None else 1
    console.print(result.message)
    if result.culprit is not None:
        console.print(f"culprit: #{result.culprit} {result.culprit_label}")
        console.print(f"  good (before it): {', '.join(f'{v:.4g}' for v in result.good_values)}")
        console.print(f"  bad  (with it):   {', '.join(f'{v:.4g}' for v in result.bad_values)}")
        if result.conviction is not None:
            console.print(f"  {stats.format_comparison(result.conviction)}")
    console.print(f"{meter.builds} build(s), {meter.runs} new run(s)")
    console.print(f"reproduce: {shlex.join(repro)}")
    return 0
