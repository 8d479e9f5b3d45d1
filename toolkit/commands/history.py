"""`patchbench history RECIPE --source S --metric NAME[@POINT]`: the tracked series in upstream order
with its change points found by Apache Otava's E-Divisive (magnitude, direction, p-value), a plot (PNG
and SVG) with the change points marked, and, with `--bisect`, the existing bisect started on each new
change point (regressions; `--direction better` gains, `both` both) between its neighbouring measured
points, naming the commit (`--git REPO` for a release history). A stretch (a regression fixed a few
points later, which Otava does not propose) is two change points, bisected together. Verdicts are kept, shown with their
change point, and never bisected twice."""

from __future__ import annotations

import uuid

from toolkit.commands.common import console, err, home_of, load, positive_int, print_json, store_of

HELP = "the tracked metric in upstream order, its change points (Apache Otava) and the commits that caused them"


def add_arguments(parser) -> None:
    from toolkit.history.otava import DEFAULTS
    from toolkit.results import metrics

    parser.add_argument("recipe", metavar="RECIPE")
    parser.add_argument("--source", help="the tracked source (default: the recipe's only source)")
    parser.add_argument("--metric", required=True, metavar="NAME[@POINT]",
                        help=f"e.g. output_tok_s@1. Known: {metrics.help_text()}")
    parser.add_argument("--window", type=int, default=DEFAULTS["window"], help="Otava's window (points)")
    parser.add_argument("--max-pvalue", type=float, default=DEFAULTS["max_pvalue"],
                        help="Otava's p-value bound (finds the candidates)")
    parser.add_argument("--alpha", type=_rate, default=DEFAULTS["alpha"],
                        help="the change-point verdict's false-alarm rate per series (default %(default)s)")
    parser.add_argument("--min-magnitude", type=float, default=DEFAULTS["min_magnitude"],
                        help="Otava's minimum relative change (default 0.03 = 3%%; Otava's own: 0)")
    parser.add_argument("--bisect", action="store_true",
                        help="bisect each new change point in --direction (both ends of a stretch)")
    parser.add_argument("--direction", choices=("worse", "better", "both"), default="worse",
                        help="which change points to bisect: regressions (default), gains, or both")
    parser.add_argument("--git", metavar="URL|PATH", help="release history: the project's git repository")
    parser.add_argument("--tag-format", default="v{version}", help="release -> git tag (default v{version})")
    parser.add_argument("--threshold", type=float, help="bisect threshold %% (default: half the change)")
    parser.add_argument("--repeats", type=positive_int, default=3, help="bisect: initial values per step")
    parser.add_argument("--max-repeats", type=positive_int, default=8, help="bisect: bound on values per step")
    parser.add_argument("-o", "--output", help="directory for the plot (default HOME/history/RECIPE)")
    parser.add_argument("--imported", action="store_true",
                        help="count imported runs too (a store filled from another's export), as compare --imported")
    parser.add_argument("--json", action="store_true")


def _rate(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate between 0 and 1 (e.g. 0.01)")
    return value


def _source(recipe, args) -> str:
    from toolkit.analysis.releases import source_spec
    from toolkit.errors import BadInput

    if args.source:
        source_spec(recipe, args.source)
        return args.source
    if len(recipe.sources) == 1:
        return next(iter(recipe.sources))
    raise BadInput(f"recipe {recipe.name} has several sources ({', '.join(recipe.sources)}): name one with --source")


def run(args) -> int:
    from pathlib import Path

    from toolkit.history import changes as changes_mod, definition
    from toolkit.history.autobisect import bisect_new, load_state, state_path
    from toolkit.history.otava import NotEnoughHistory, detect
    from toolkit.history.series import load_history
    from toolkit.history.track import TrackBusy, stack_digest, workspace_lock
    from toolkit.results import metrics

    spec = metrics.parse_spec(args.metric)
    recipe = load(args.recipe)
    source = _source(recipe, args)
    home, store = home_of(args), store_of(args)
    hist = load_history(store, recipe.name, source, spec, stack=stack_digest(recipe),
                        now=definition.current(recipe), imported=args.imported)
    spec = metrics.MetricSpec(spec.metric, hist.point)
    measured = hist.measured
    hib = spec.info.higher_is_better
    cps, why_none, detection = [], None, None
    try:
        detection = detect([e.value for e in measured], home, window=args.window, max_pvalue=args.max_pvalue,
                           alpha=args.alpha,
                           min_magnitude=args.min_magnitude, console=err)
        cps = detection.change_points
    except NotEnoughHistory as exc:
        why_none = exc.message
    changes = [(measured[c.index - 1], measured[c.index], c.direction(hib), c.forward_change_percent) for c in cps]
    bisected_now: list[str] = []
    if args.bisect and changes:
        wanted = ("worse", "better") if args.direction == "both" else (args.direction,)
        lock = workspace_lock(home)
        try:
            lock.acquire(timeout=0)
        except Exception:
            raise TrackBusy(f"a `patchbench track` is running in {home}; bisect when it is done") from None
        # a stretch's two ends go together: the commit that fixed a regression is asked for with it
        asked = {c.stretch for c, ch in zip(cps, changes) if c.stretch and ch[2] in wanted}
        chosen = [ch for c, ch in zip(cps, changes) if ch[2] in wanted or (c.stretch and c.stretch in asked)]
        left = [ch for ch in changes if ch not in chosen]
        if left:  # said, not silently skipped
            other = sorted({ch[2] for ch in left})
            err.print(f"{len(left)} change point(s) {'/'.join(other)} not bisected: --bisect follows --direction "
                      f"{args.direction} (--direction both bisects every one)", markup=False, highlight=False)
        try:
            _, bisected_now = bisect_new(recipe, source, chosen, spec=spec, home=home,
                                         store=store, console=err, git=args.git, tag_format=args.tag_format,
                                         threshold=args.threshold, repeats=args.repeats, max_repeats=args.max_repeats,
                                         group_id=uuid.uuid4().hex[:12])
        finally:
            lock.release()
    verdicts = load_state(state_path(home, recipe.name, source))["bisects"]
    rows = changes_mod.rows(hist, cps, spec, verdicts, bisected_now)
    plot = None
    if measured:
        from toolkit.report.history_plot import history_figure, write_history_plot

        out_dir = Path(args.output) if args.output else state_path(home, recipe.name, source).parent
        title = f"{recipe.name}: {spec} across {source} history"
        fig = history_figure(title, f"{spec.metric} ({spec.info.unit})", [e.label for e in hist.entries],
                             [e.value for e in hist.entries], changes_mod.marks(hist, rows))
        plot = write_history_plot(fig, out_dir, f"{source}-{spec.metric}@{spec.point}", title,
                                  ([changes_mod.line(r) for r in rows] or [why_none or "no change points"])
                                  + hist.older_lines())
    if args.json:
        print_json({"recipe": recipe.name, "source": source, "metric": spec.metric, "point": spec.point,
                    "gpu_key": hist.gpu_key, "other_gpu_runs": hist.other_gpus,
                    "older_definition": [{"changed": what, "points": labels} for what, labels in hist.older.items()],
                    "series": [e.to_dict() for e in hist.entries],
                    "change_points": rows, "not_enough_history": why_none,
                    "otava": detection.otava if detection else None,
                    "otava_options": detection.options if detection else None, "plot": plot})
        return 0
    _print(hist, rows, why_none, plot, spec)
    if not why_none:
        from toolkit.history.change_verdict import legend

        rule = legend(alpha=args.alpha, max_pvalue=args.max_pvalue, min_magnitude=args.min_magnitude)
        console.print(f"[dim]{rule}[/]")
    return 0


def _print(hist, rows, why_none, plot, spec) -> None:
    from rich.markup import escape
    from rich.table import Table

    from toolkit.analysis import stats

    t = Table(title=f"{hist.recipe}: {spec} by {hist.source} point (oldest first)")
    for col in ("point", "date", spec.metric, "runs", "status"):
        t.add_column(col)
    for e in hist.entries:
        t.add_row(e.label, e.date or "", stats.format_value(e.value) if e.value is not None else "-",
                  str(len(e.run_ids)), escape(e.status if not e.reason else f"{e.status}: {e.reason[:80]}"))
    console.print(t)
    if hist.other_gpus:
        console.print(f"{hist.other_gpus} ok run(s) on another GPU kind left out (this series: {hist.gpu_key})")
    for line in hist.older_lines():
        console.print(line, markup=False)
    if why_none:
        console.print(why_none)
    elif not rows:
        console.print("no change points (Otava's E-Divisive, and no stretch)")
    from toolkit.history.changes import line as change_line

    for r in rows:
        console.print(change_line(r), markup=False)
    if plot:
        console.print(f"plot: {plot['png']} ({plot['svg']}, {plot['html']})")

