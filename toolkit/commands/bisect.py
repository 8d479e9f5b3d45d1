"""`patchbench bisect RECIPE --metric NAME[@POINT]`: the first patch of the stack, the first release of
a PyPI source, or the first upstream commit of a git source that moves the metric past --threshold
percent (worse by default; `--direction better` finds the one that brought a gain), against the
nearest item before it found good (`--reference neighbour`, default) or the base (`--reference base`).

- stack:    `patchbench bisect full-stack --metric output_tok_s@1`
- releases: `patchbench bisect baseline --source sglang --good 0.5.10.post1 --bad 0.5.23` (or
            `--versions 0.5.10.post1,0.5.16,0.5.23`); each probed release is its own env with its own
            dependency pins; with `--git URL|PATH` the search continues into the commits between the
            two neighbouring releases' tags (`--tag-format`, default v{version})
- commits:  `--source S --good REV --bad REV` on a git source
Noise-aware (more repeats where a step is undecided), results cached per env key within this search's own
campaign (a killed bisect asked again resumes its sweep; a finished one replays it, launching nothing, or with
`--fresh` measures again in a new campaign; stored runs of other campaigns are left out and named),
apply/build failures skipped. `--until check` validates, lists the probes and builds the first
probe's env without a GPU."""

from __future__ import annotations

import shlex
import uuid
from pathlib import Path

from toolkit.commands.common import (console, err, home_of, load, positive_int, print_json,
                                     require_measured_point, store_of)
from toolkit.executors.config import add_executor_arguments
from toolkit.errors import plural

HELP = ("find the patch, release or upstream commit that moved a metric (worse, or --direction better) "
        "in about log2(n)+1 builds, noise-aware")


MAX_REPEATS = 8  # values a step of the search takes at most while undecided


def add_arguments(parser) -> None:
    from toolkit.results import metrics

    parser.add_argument("recipe", metavar="RECIPE")
    parser.add_argument("--metric", required=True, metavar="NAME[@POINT]",
                        help=f"e.g. output_tok_s@1. Known: {metrics.help_text()}")
    parser.add_argument("--threshold", type=float, default=5.0,
                        help="percent change that counts, against the --reference (default %(default)s%%)")
    parser.add_argument("--reference", choices=("neighbour", "base"), default="neighbour",
                        help="what a probe is compared with: the nearest item before it found good (neighbour, "
                             "default: a patch costing 12%% against its predecessor counts even after an earlier "
                             "gain) or the base (every item against the start: small losses add up)")
    parser.add_argument("--direction", choices=("worse", "better"), default="worse",
                        help="look for the change that made the metric worse (a regression, default) or better (a gain)")
    parser.add_argument("--repeats", type=positive_int, default=None,
                        help="initial values per step (default 2; 3 with --fixed)")
    parser.add_argument("--max-repeats", type=positive_int, default=MAX_REPEATS, help="bound on the values a step compares, each side, when undecided (the reference is launched in each step it serves)")
    parser.add_argument("--fixed", action="store_true",
                        help="judge each step by the fixed-sample t interval (looked at after every top-up) instead "
                             "of the sequential confidence sequence, which keeps its error rate however often it is "
                             "looked at")
    parser.add_argument("--source", help="bisect releases (PyPI source) or commits (git source) of this source")
    parser.add_argument("--good", help="with --source: a known-good release or revision")
    parser.add_argument("--bad", help="with --source: a known-bad release or revision")
    parser.add_argument("--versions", help="with --source (PyPI): an explicit, ordered, comma-separated release list")
    parser.add_argument("--git", metavar="URL|PATH",
                        help="release bisect: a git repository of the same project; continue into its commits")
    parser.add_argument("--tag-format", default="v{version}", help="release -> git tag (default v{version})")
    parser.add_argument("--until", choices=("check",), help="stop after validating and building the first probe")
    parser.add_argument("--missing-evidence", action="store_true",
                        help="also count runs stored invalid because a patch's activation evidence was missing "
                             "(in the first measurement and in every replay alike)")
    parser.add_argument("--fresh", action="store_true",
                        help="measure again in a new campaign: a finished bisect asked again otherwise replays its "
                             "own sweep's stored runs, launching nothing (a killed one continues its sweep)")
    parser.add_argument("--json", action="store_true")
    add_executor_arguments(parser)


def _releases(recipe, args, spec) -> tuple[list[str], bool]:
    """(the releases to bisect, oldest first; whether they were given newest first: a newer good end)."""
    from packaging.version import Version

    from toolkit.analysis.releases import project_name
    from toolkit.errors import BadInput
    from toolkit.tree.package_index import check_releases, releases_between

    if args.versions:
        versions = [v.strip() for v in args.versions.split(",") if v.strip()]
        if len(versions) < 2:
            raise BadInput("--versions needs at least two releases (the first is taken as good)")
        versions = check_releases(project_name(spec), versions, spec.index)
        order = [Version(v) for v in versions]
        if sorted(order) != order and sorted(order, reverse=True) != order:
            raise BadInput(f"--versions {args.versions}: not in release order",
                           hint="list them oldest first (the first is taken as good), or newest first from a newer good one")
    else:
        if not (args.good and args.bad):
            raise BadInput("--source needs --good and --bad (or --versions)")
        versions = releases_between(project_name(spec), args.good, args.bad, spec.index)
    newest_first = Version(versions[0]) > Version(versions[-1])
    return (versions[::-1] if newest_first else versions), newest_first


def _opposite(direction: str) -> str:
    return "better" if direction == "worse" else "worse"


def run(args) -> int:
    """The bisect in its campaign (toolkit.analysis.search_campaign): a finished sweep of the same search
    that cannot answer without a launch is not launched into: the bisect measures again in a new one."""
    import contextlib

    from toolkit.analysis.search_campaign import NotReplayable

    try:
        with contextlib.ExitStack() as leases:  # the sweep's lease, held while this call measures in it
            return _run(args, leases, fresh=args.fresh)
    except NotReplayable as exc:
        err.print(f"note: {exc}: measuring again in a new campaign (its runs are left out and named)", markup=False,
                  highlight=False)
    with contextlib.ExitStack() as leases:
        return _run(args, leases, fresh=True)


def _run(args, leases, *, fresh: bool) -> int:
    from toolkit.results import metrics
    from toolkit.analysis import stats
    from toolkit.analysis.bisect import bisect_items, bisect_stack
    from toolkit.analysis.releases import git_variant, release_variant, tag_for
    from toolkit.analysis.variants import VariantMeter, patch_label, prefix_overrides, stack_of, upstream_commits
    from toolkit.commands.attribute import print_gates, print_runs_used, require_gpu_if_needed
    from toolkit.errors import BadInput

    spec = metrics.parse_spec(args.metric)  # before anything is built or launched
    recipe = load(args.recipe)
    require_measured_point(spec, recipe)
    hib = spec.info.higher_is_better
    if not args.threshold > 0:
        raise BadInput(f"--threshold {args.threshold:g}: a percent change that counts must be above 0")
    if args.threshold >= 100 and (args.direction == "worse") == bool(hib):
        raise BadInput(f"--threshold {args.threshold:g}: {spec.metric} ({'higher' if hib else 'lower'} is better) "
                       f"cannot get {args.direction} by {args.threshold:g}% or more (it would fall to zero or below)")
    if args.repeats is not None and args.max_repeats < max(2, args.repeats):
        raise BadInput(f"--max-repeats {args.max_repeats} is below the {max(2, args.repeats)} values a step starts "
                       "with (--repeats): the cap would not hold", hint=f"--max-repeats {max(2, args.repeats)} or more")
    home = home_of(args)
    meter = VariantMeter(recipe, home, store_of(args), spec, err, group_id=uuid.uuid4().hex[:12],
                         missing_evidence=args.missing_evidence, search=_search_key(recipe, args),
                         fresh=fresh, leases=leases)
    if args.executor == "slurm":  # each probe one Slurm job
        meter = _slurm_meter(recipe, home, meter, spec, args)
    initial = args.repeats or (3 if args.fixed else 2)
    kw = dict(higher_is_better=spec.info.higher_is_better, threshold_pct=args.threshold, initial_repeats=max(2, initial),
              max_repeats=args.max_repeats, on_step=lambda s: err.print(s.line, markup=False, highlight=False),
              direction=args.direction, reference=args.reference, sequential=not args.fixed)
    if not args.fixed:  # one more value a side after each look, as the sequential rule looks
        from toolkit.analysis.bisect_rule import step_design

        kw["repeat_step"] = 1
        # each probe's runs record the design they were launched under, as `run`'s launches do
        meter.design = step_design(threshold_pct=args.threshold, initial_repeats=kw["initial_repeats"],
                                   max_repeats=args.max_repeats)
        from toolkit.analysis.answers_sequential import Design as AnswersDesign

        meter.answers_design = AnswersDesign()  # a probe asks its answers only while their verdict is unsettled
    repro = ["patchbench", "bisect", recipe.name, "--metric", args.metric, "--threshold", str(args.threshold)]
    if args.direction != "worse":
        repro += ["--direction", args.direction]
    if args.reference != "neighbour":
        repro += ["--reference", args.reference]
    if args.missing_evidence:
        repro += ["--missing-evidence"]
    if args.fixed:
        repro += ["--fixed"]
    if args.repeats is not None:
        repro += ["--repeats", str(args.repeats)]
    if args.max_repeats != MAX_REPEATS:  # the cap decides how far a step is topped up: the same search needs the same one
        repro += ["--max-repeats", str(args.max_repeats)]
    commit_phase = None
    direction = args.direction  # the change searched for in upstream order (a newer good release flips it)
    names = None  # the patches of a stack bisect (a bisect of releases or commits has no prefixes)
    if args.source:
        source = recipe.sources.get(args.source)
        if source is None:
            raise BadInput(f"recipe {recipe.name} has no source `{args.source}`",
                           hint=f"sources: {', '.join(recipe.sources)}")
        if source.kind == "pypi":
            versions, newest_first = _releases(recipe, args, source)
            if newest_first:  # good newer than bad: the release that changed it, found in upstream order
                direction = kw["direction"] = _opposite(args.direction)
                err.print(f"the good end {versions[-1]} is newer than the bad end {versions[0]}: bisecting the releases "
                          f"in upstream order for the one that made {args.metric} {direction} (what is "
                          f"{args.direction} walking back)", markup=False)
            if args.git and "://" not in args.git and "@" not in args.git \
                    and not Path(args.git).expanduser().is_dir():  # the commit phase needs it: checked before the releases
                raise BadInput(f"--git {args.git}: no such repository (a local path or a URL of the source's git)")
            variants = [release_variant(recipe, args.source, v, home) for v in versions]
            err.print(f"bisecting {len(versions) - 1} releases of {args.source} after {versions[0]}: "
                      + ", ".join(versions[1:]))
            if args.until == "check":
                return _dry_run(meter, variants, versions, args, newest_first)
            require_gpu_if_needed(recipe, args)

            def measure(k: int, r: int):
                return meter.measure(versions[k], {}, r, recipe=variants[k])

            def ready(k: int) -> bool:
                return meter.ready(versions[k], {}, recipe=variants[k])

            result = _measured(meter, versions[0], recipe, lambda: bisect_items(versions, measure, ready=ready, **kw))
            repro += ["--source", args.source] + (["--versions", args.versions] if args.versions
                                                  else ["--good", args.good, "--bad", args.bad])
            if args.git and result.culprit is not None:
                commit_phase = (versions[result.culprit - 1], versions[result.culprit])
        elif source.kind == "git":
            if not (args.good and args.bad):
                raise BadInput("--source needs --good REV and --bad REV")
            if args.until == "check":
                raise BadInput("--until check is for release bisects; a commit bisect needs no dry run")
            require_gpu_if_needed(recipe, args)
            commits = upstream_commits(recipe, args.source, args.good, args.bad, home)
            result = _bisect_commits(meter, recipe, args.source, commits, f"{args.good}..{args.bad}", kw)
            repro += ["--source", args.source, "--good", args.good, "--bad", args.bad]
        else:
            raise BadInput(f"source {args.source} is a {source.kind} source; bisect takes a pypi (releases) "
                           "or git (commits) source")
    else:
        stack = stack_of(recipe)
        if not stack:
            raise BadInput(f"recipe {recipe.name} has no patches to bisect")
        if args.executor == "local":  # a Slurm node has the GPU, not this machine
            require_gpu_if_needed(recipe, args)
        names = [patch_label(recipe, p) for _, p in stack]
        err.print(f"bisecting {plural(len(stack), 'patch')} of {recipe.name}", markup=False)

        def measure(k: int, r: int):
            return meter.measure(f"prefix{k}", prefix_overrides(recipe, k), r)

        def ready(k: int) -> bool:
            return meter.ready(f"prefix{k}", prefix_overrides(recipe, k))

        result = _measured(meter, "prefix0", recipe,
                           lambda: bisect_stack(len(stack), measure, labels=names, ready=ready, **kw))
    commit_result = commit_meter = None
    first_builds = meter.builds
    commit_direction = direction
    if commit_phase:  # two neighbouring releases in upstream order (a newer good end was ordered above)
        older, newer = commit_phase
        good_tag, bad_tag = (tag_for(v, args.tag_format) for v in (older, newer))
        base = git_variant(recipe, args.source, args.git, good_tag, home)
        commits = upstream_commits(base, args.source, good_tag, bad_tag, home)
        err.print(f"release {newer} named; bisecting the {len(commits) - 1} commits {good_tag}..{bad_tag}")
        commit_meter = VariantMeter(base, home, meter.store, spec, err, group_id=meter.group_id,
                                    missing_evidence=args.missing_evidence, design=meter.design,
                                    search=meter.search, joined=True,  # the same campaign as the releases
                                    replay_of=meter.replay_of)
        if args.executor == "slurm":
            commit_meter = _slurm_meter(base, home, commit_meter, spec, args)
        commit_result = _bisect_commits(commit_meter, base, args.source, commits, f"{good_tag}..{bad_tag}", kw)
        meter.builds += commit_meter.builds
        meter.runs += commit_meter.runs
        repro += ["--git", args.git, "--tag-format", args.tag_format]
    meter.finish()  # answered: a later call of this search replays this sweep, never launches into it
    answers, gates, notes = _quality(meter, names)
    from toolkit.analysis.bisect_rule import legend

    rule = legend(threshold_pct=args.threshold, direction=direction, reference=args.reference,
                  sequential=not args.fixed, max_repeats=args.max_repeats)
    if args.json:
        out = {"recipe": recipe.name, "metric": spec.metric, "point": meter.point, "direction": direction,
               "reference": args.reference, "threshold_pct": args.threshold,
               **_result_json(result), **meter.evidence(), "builds": meter.builds, "first_phase_builds": first_builds,
               "runs": meter.runs, "legend": rule, "reproduce": shlex.join(repro)}
        if commit_result is not None:
            out["commit"] = {**_result_json(commit_result), **commit_meter.evidence(), "direction": commit_direction}
        if names is not None:
            out["quality"] = {k: {str(p): q.to_dict() for p, q in per.items()} for k, per in answers.items()}
            out["gate"] = {k: g.to_dict() for k, g in gates.items()}
            out["notes"] = notes
        print_json(out)
        return _exit_code(result)
    _print_result(result, stats, direction)
    from toolkit.analysis import quality_runs

    for line in quality_runs.lines(answers):  # each measured prefix against the base, beside the speed
        console.print(f"answers: {line}", markup=False, highlight=False)
    print_gates(gates)
    for line in notes:
        console.print(f"note: {line}", markup=False, highlight=False)
    console.print(rule, markup=False, highlight=False, style="dim")
    print_runs_used(meter)
    _print_left_out(meter)
    _print_skipped(meter)
    if getattr(meter, "not_continued", None):  # a Slurm bisect: an earlier sweep of this search measured again
        console.print(f"note: {meter.not_continued_line()}", markup=False, highlight=False)
    if commit_result is not None:
        console.print("[bold]commits[/] between the neighbouring releases:")
        _print_result(commit_result, stats, commit_direction)
        print_runs_used(commit_meter)
        _print_left_out(commit_meter)
        _print_skipped(commit_meter)
    console.print(f"{meter.builds} variant(s) prepared, {meter.runs} new run(s); stored values of this "
                  "bisect's own campaign reused per env key")
    console.print(f"reproduce: {shlex.join(repro)}", markup=False)
    return _exit_code(result)


def _search_key(recipe, args) -> str:
    """What this bisect asks (toolkit.analysis.search_campaign): a later call asking the same continues
    its campaign (a killed bisect resumed); its probes' runs of any other campaign are left out."""
    from toolkit.analysis.search_campaign import key

    return key("bisect", recipe.name, args.metric, args.threshold, args.direction, args.reference,
               "fixed" if args.fixed else "sequential", args.repeats, args.max_repeats,
               "missing-evidence" if args.missing_evidence else "", args.source, args.good, args.bad,
               args.versions, args.git, args.tag_format if args.git else "")


def _print_left_out(meter) -> None:
    """One line per probe whose stored runs from another campaign its looks left out (it launched again; in
    the replay of a finished sweep nothing launched: that sweep's own launches answer)."""
    tail = (f"not read by this replay of sweep {meter.group_id} (its own launches answer; nothing launched)"
            if meter.replay_of else "launched again in this bisect")
    for line in meter.left_out_lines().values():
        console.print(f"left out: {line}; {tail}", markup=False, highlight=False)


def _print_skipped(meter) -> None:
    """One line per probe that gave no value: why (the apply or build error, the failed run and its log); one
    per failed launch of a probe that has values."""
    for label, why in meter.skipped.items():
        console.print(f"skipped: {label}: {why}", markup=False, highlight=False)
    for label, whys in getattr(meter, "failed", {}).items():  # a measured probe's top-up that failed: no skip
        for why in whys:
            console.print(f"failed launch: {label}: {why} (its other values count)", markup=False, highlight=False)


def _exit_code(result) -> int:
    """0 when the bisect named a culprit or found none past the threshold; 1 when it could only narrow
    it to several items (steps it could not measure), the text and JSON alike."""
    return 0 if result.culprit is not None or result.candidates is None else 1


def _quality(meter, names):
    """The answers' and the gate's verdicts of each measured prefix against the base, and the notes
    on kept files they could not trust (a stack bisect; `names` None for a bisect of releases or
    commits: no prefixes)."""
    from toolkit.analysis import quality_runs

    from toolkit.results.artifacts import VouchedStore

    if names is None:
        return {}, {}, []
    vouched = VouchedStore(meter.store)  # answers only from bytes with the stored sha256
    # answers are no speed: a probe's stored runs of another campaign, left out of the speed looks, still
    # answered (a probe's launches here ask only while its answers verdict, over every stored run, is unsettled)
    log = [(label, key, values, [*ids, *meter.reused.get(label, ())]) for label, key, values, ids in meter.log]
    return (quality_runs.meter_verdicts(vouched, log, names),
            quality_runs.meter_gates(vouched, log, names), vouched.notes)


def _slurm_meter(recipe, home, meter, spec, args):
    from toolkit.executors.config import cluster_config
    from toolkit.executors.slurm_variants import SlurmVariantMeter

    return SlurmVariantMeter(recipe, home, meter.store, spec, err, group_id=meter.group_id,
                             missing_evidence=meter.missing_evidence, design=meter.design, search=meter.search,
                             cfg=cluster_config(args, home), command="bisect", joined=meter.joined)


def _bisect_commits(meter, recipe, source: str, commits: list[str], span: str, kw: dict):
    from toolkit.analysis.bisect import bisect_items

    err.print(f"bisecting {len(commits) - 1} commits of {source} ({span})")

    def measure(k: int, r: int):
        return meter.measure(commits[k][:12], {source: {"rev": commits[k]}}, r, recipe=recipe)

    def ready(k: int) -> bool:
        return meter.ready(commits[k][:12], {source: {"rev": commits[k]}}, recipe=recipe)

    return _measured(meter, commits[0][:12], recipe,
                     lambda: bisect_items([c[:12] for c in commits], measure, ready=ready, **kw))


def _measured(meter, base_label: str, recipe, search):
    """`search()`, whose base could not be measured said with why (the apply/build error, or the failed
    run and its log) and the recipe."""
    from toolkit.analysis.bisect import BaseNotMeasured

    try:
        return search()
    except BaseNotMeasured as exc:
        raise exc.because(meter.skipped.get(base_label), recipe=recipe.name) from None


def _result_json(result) -> dict:
    return {"culprit": result.culprit, "culprit_label": result.culprit_label, "candidates": result.candidates,
            "confirmed": result.confirmed, "repaired": result.repaired, "good_values": result.good_values, "bad_values": result.bad_values,
            "message": result.message,
            # each step as it was decided (its line as printed): which probes were skipped, or decided uncertain
            "steps": [s.to_dict() for s in result.steps]}


def _print_result(result, stats, direction: str = "worse") -> None:
    console.print(result.message, markup=False, highlight=False)
    if result.culprit is not None:
        before, after = ("good (before it)", "bad  (with it)") if direction == "worse" else \
            ("before the gain", "with the gain")
        console.print(f"{'culprit' if direction == 'worse' else 'the gain'}: #{result.culprit} {result.culprit_label}",
                      markup=False)
        console.print(f"  {before + ':':<18} {', '.join(f'{v:.4g}' for v in result.good_values)}", markup=False)
        console.print(f"  {after + ':':<18} {', '.join(f'{v:.4g}' for v in result.bad_values)}", markup=False)
        if result.conviction is not None:
            console.print(f"  {stats.format_comparison(result.conviction)}", markup=False)


def _dry_run(meter, variants, versions, args, newest_first: bool = False) -> int:
    """Validate, list the probes, build the first probe's env and run its static check (no GPU)."""
    from toolkit.analysis.bisect import max_builds_bound

    n = len(versions) - 1
    p = meter._prepare(versions[0], {}, variants[0], until="check")
    if args.json:
        print_json({"releases": versions, "newest_first": newest_first, "max_builds": max_builds_bound(n),
                    "first_probe": versions[0], "first_env": p.env.key if p else None})
    else:
        console.print(f"{n} releases after {versions[0]}: {', '.join(versions[1:])}")
        end = "the known-bad end: the good end is newer" if newest_first else "the known-good end"
        console.print(f"at most {max_builds_bound(n)} builds; first probe: {versions[0]} ({end})")
        if p is not None:
            console.print(f"first probe {versions[0]}: env {p.env.key[:16]} built and statically checked")
    return 0 if p is not None else 1
