"""`patchbench track RECIPE --source S (--releases | --branch B --every N | --since DATE)`: measure the
recipe, its patch stack re-applied, at each upstream point not measured yet (toolkit/history/).

- releases: `patchbench track demo/update --source sglang --releases [--since 0.1.4] [--git REPO]`
  (every release on the source's package index; with --git each point carries its tag's date)
- commits:  `patchbench track RECIPE --source sglang --branch main --every 20` or `--since 2026-01-01`
Meant for cron or a timer: resumable (points already measured are skipped), one track per workspace,
a failing point is stored and the next one measured; points where the stack does not apply are
recorded as such; a point measured before an edit of the recipe's server settings, model, [target]
or [benchmark] is measured again. `--executor slurm`: each point not measured yet is a Slurm job, all submitted at
once (toolkit/executors/slurm_track.py). Then `patchbench history RECIPE --source S --metric M`."""

from __future__ import annotations

import uuid

from toolkit.commands.common import console, count_int, err, home_of, load, positive_int, print_json, store_of
from toolkit.executors.config import add_executor_arguments

HELP = "measure the recipe (its patches re-applied) at each new upstream release or commit, resumably"


def add_arguments(parser) -> None:
    parser.add_argument("recipe", metavar="RECIPE")
    parser.add_argument("--source", required=True, help="the upstream source to follow")
    parser.add_argument("--releases", action="store_true", help="every release on a pypi source's index")
    parser.add_argument("--branch", help="a git source's branch to follow (first-parent commits)")
    parser.add_argument("--every", type=int, help="with --branch: every N-th commit, counted from the root")
    parser.add_argument("--since", help="with --branch: commits since this date; with --releases: from this version")
    parser.add_argument("--git", metavar="URL|PATH", help="with --releases: the project's git repository (tag dates)")
    parser.add_argument("--tag-format", default="v{version}", help="release -> git tag (default v{version})")
    parser.add_argument("--repeats", type=positive_int, default=1, help="runs per point (default 1)")
    parser.add_argument("--limit", type=count_int,
                        help="measure at most this many new points now (0: list them, measure none)")
    parser.add_argument("--settle", action="store_true",
                        help="a step between neighbouring points measured now whose runs differ by at least the "
                             "recipe's min_effect launches both points until its sequential verdict is settled")
    parser.add_argument("--max-repeats", type=int, default=None, metavar="N",
                        help="with --settle: launches each a step may take (default: the recipe's `[benchmark] max_repeats`, 16)")
    parser.add_argument("--json", action="store_true")
    add_executor_arguments(parser)


def points_of(recipe, args, home):
    """The upstream points the options name (BadInput for an unknown source or a wrong mode)."""
    from toolkit.analysis.releases import source_spec
    from toolkit.errors import BadInput
    from toolkit.history.points import git_points, release_points

    spec = source_spec(recipe, args.source)
    if spec.kind == "git":
        if args.releases:
            raise BadInput(f"source {args.source} is a git source; --releases is for a pypi source",
                           hint="--branch BRANCH --every N or --since DATE")
        if args.branch and not (args.every or args.since):
            args.every = 1
        return git_points(recipe, args.source, home, branch=args.branch, every=args.every, since=args.since)
    if spec.kind == "pypi":
        if args.branch or args.every:
            raise BadInput(f"source {args.source} is a pypi source; --branch/--every are for a git source",
                           hint="--releases")
        if not args.releases:
            raise BadInput(f"source {args.source} is a pypi source: track it with --releases")
        return release_points(recipe, args.source, git=args.git, tag_format=args.tag_format, since=args.since)
    raise BadInput(f"source {args.source} is a {spec.kind} source; track follows a pypi (releases) or git "
                   "(commits) source")


def run(args) -> int:
    from toolkit.commands.attribute import require_gpu_if_needed
    from toolkit.errors import BadInput
    from toolkit.history.points import variant_for
    from toolkit.history.track import track

    if args.repeats < 1:
        raise BadInput("--repeats must be at least 1")
    recipe = load(args.recipe)
    home = home_of(args)
    points = points_of(recipe, args, home)
    require_gpu_if_needed(recipe, args)
    store = store_of(args)
    err.print(f"tracking {recipe.name} on {len(points)} {points[0].kind}(s) of {args.source}: "
              f"{points[0].label} .. {points[-1].label}")
    group_id, elsewhere = uuid.uuid4().hex[:12], None
    if args.executor == "slurm":  # each point not measured yet one Slurm job; their runs imported here
        from toolkit.executors.config import cluster_config
        from toolkit.executors.slurm_track import slurm_points

        elsewhere = slurm_points(recipe, args.source, cfg=cluster_config(args, home), home=home, store=store,
                                 repeats=args.repeats, group_id=group_id, console=err)
    settle = None
    if args.settle:
        if args.repeats > 1 or elsewhere is not None:
            raise BadInput("--settle measures one run a point and adds launches where a step looks like a change; "
                           "not with --repeats or --executor slurm")
        from toolkit.analysis import sequential_design as designs

        settle = designs.for_bench(recipe.benchmark, max_repeats=args.max_repeats, pool_stored=False)
    elif args.max_repeats is not None:
        raise BadInput("--max-repeats is for --settle")
    res = track(recipe, args.source, points, lambda p: variant_for(recipe, args.source, p, home), home=home,
                store=store, console=err, repeats=args.repeats, group_id=group_id, limit=args.limit,
                elsewhere=elsewhere, settle=settle)
    summary = settle_summary(recipe, settle, res, store) if settle is not None else None
    if args.json:
        print_json({"recipe": recipe.name, "source": args.source, "points": [p.to_dict() for p in points],
                    **res.to_dict(), **({"settle": summary} if summary else {})})
    else:
        console.print(f"{len(res.measured)} point(s) measured now, {len(res.already)} measured before")
        for label, what in res.again.items():
            console.print(f"  {label}: measured again: the recipe changed since ({'; '.join(what)})", markup=False)
        for label, (outcome, why) in res.recorded.items():
            console.print(f"  {label}: {outcome}: {why}", markup=False)
        for label, why in res.failed.items():
            console.print(f"  {label}: failed: {why}", markup=False)
        for st in res.steps:
            console.print(f"  step {st['before']} -> {st['after']}, {st['metric']} @ {st['point']}: {st['text']}",
                          markup=False)
        if summary:
            console.print(summary["text"], markup=False, highlight=False)
            err.print(f"[dim]{summary['legend']}[/]")
        from toolkit.history.settle import headline

        metric, point = headline(recipe)  # a metric and point this recipe's benchmark measures
        console.print(f"next: patchbench history {recipe.name} --source {args.source} --metric {metric}@{point}",
                      markup=False)
    return 0 if not res.failed else 1


def settle_summary(recipe, design, res, store) -> dict:
    """`--settle`: the design its steps were judged with (the cap among it) and what this track launched:
    its launches and their time (launch to ready + benchmark, x the GPUs a launch holds) against the
    one launch a point that a plain track takes."""
    from toolkit.analysis import launch_cost, sequential as seq

    rows = store.runs(run_ids=res.run_ids) if res.run_ids else []
    seconds = sum(launch_cost.launch_seconds(r) for r in rows)
    gpus = launch_cost.gpus_held(recipe)
    plain = len(res.measured)  # a plain track: one launch a point measured now
    held = f"{seconds / 60:.1f} min" + (f", {seconds * gpus / 60:.2f} GPU-min" if gpus else " (no GPU held: [server] gpus = 0)")
    steps = len(res.steps)
    text = (f"settle: {steps} step(s) judged sequentially, {design.min_repeats}..{design.max_repeats} launches each "
            f"(max_repeats {design.max_repeats}, min_effect {100 * design.min_effect:g}%); cost: {len(rows)} launch(es) "
            f"now, {held}; a plain track: {plain} (one a point measured now)")
    return {"max_repeats": design.max_repeats, "min_repeats": design.min_repeats, "min_effect": design.min_effect,
            "steps": steps, "launches": len(rows), "seconds": round(seconds, 1),
            "gpu_minutes": round(seconds * gpus / 60.0, 2), "plain_launches": plain, "text": text,
            "legend": seq.legend(design)}
