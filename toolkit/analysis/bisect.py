"""Noise-robust bisection over a patch stack (or a range of upstream commits). Pure: the caller
passes a measurement callback; nothing here builds, runs or stores.

Prefix `k` is the base with the first `k` items applied (prefix 0 = the base, prefix n = the whole
stack). A prefix is **bad** when its metric is worse than the reference's by more than
`threshold_pct`, **good** otherwise; we look for the first bad prefix after a good one, the culprit.
The reference (`reference=`) is by default the **neighbour**: the nearest prefix before it already
found good (`lo` below; the base at first), so a patch that costs 12% against its predecessor is bad
even after an earlier gain put the stack above the base; `reference="base"` compares every prefix
with the base (a slow drift of small losses then adds up to a culprit).

The search keeps `lo` (a good prefix, initially the base) and `hi` (a bad prefix, initially the
virtual prefix n+1, "bad" by definition) and measures the middle, so the whole stack is measured
only when the search gets there. Without skips (and without a repair pass, below) it measures at
most `max_builds_bound(n) = ceil(log2(n+1)) + 1` distinct prefixes, base included: 4 for 7 patches,
5 for 8, 6 for 16 (5 for every culprit but the last, whose conviction needs the whole stack).
Telling n culprits and "none" apart takes log2(n+1) yes/no answers, so `ceil(log2 n) + 1` cannot
be met when n is a power of two. A culprit is convicted by measurements at culprit-1 (good) and
culprit (bad).

Noise: each step compares the prefix with the base through the (1 - alpha) confidence interval of
the ratio of means (`toolkit.analysis.stats.ratio_ci`, delta method with Welch's t), over the values of the
two measured in the same stretch of time: the reference is launched around the probe's first launches
(r p p r), and a step reads the reference's launch just before the probe's first and every one after it,
never its launches of another moment. A box that turns loaded for a while then slows both sides of a step
alike, instead of reading as a change at every probe measured in that while (a harmless patch named the
culprit on a loaded CI box, 2026-12-06). It costs the reference's launches in every step:
benchmarks/bisect_accuracy.py, 16 patches, CLI settings, 1000 trials: 56.5 launches a bisect instead of
36.5 on a steady box, the culprit found in 99.1% (99.4%); with `--drift 0.15` (a box 15% slow now and then)
found in 69.4% instead of 43.0%. The step is decided when
the whole interval of the relative loss lies above the threshold (bad) or below it (good); until then
it asks for `repeat_step` more values of the prefix (and of the reference, when it has no more values in
the step than the prefix; the two in alternating order), up to `max_repeats` each in the step (a prefix that
is the reference of several steps is launched in each). A step still undecided there is *uncertain*: when both
neighbours lo and hi have been measured it sides with the one its mean is closer to (asv find's rule:
insensitive to the base's own sampling error and to the drift of the other items), otherwise with
the point estimate's side of the threshold. Values are cached per prefix; the base's values serve
every step.

Conviction and repair: once found, culprit-1 and culprit are topped up to `confirm_repeats` values
measured together (the one measured earlier launched again) and compared directly (`conviction`, `confirmed` when that step alone is a significant regression).
A weak conviction triggers one more pass over the same cache (now holding the conviction's extra
values) that measures the whole stack first (a real hi for the closeness rule): after uncertain
steps, and after certain ones too, since the reference's first values were measured before the
probes and a slow moment of the box then reads as a change at every probe (seen on a loaded CI
box: every release "with the gain" against a base measured slow). The repair costs at most one
more bisection: `2 * max_builds_bound(n)` distinct prefixes in all (or `max_builds`); its answer is
taken if it convicts (`repaired`). `full_stack_if_uncertain=True` measures the whole stack at the first uncertain step
instead: a little more accurate, ~0.2 more builds on average, up to one build over the bound.

Skips: `measure` returning None (or no values) means the prefix cannot be measured (apply/build
failure, `git bisect run`'s exit 125); with `ready`, a probe that cannot be prepared is skipped before
its reference's launch just before it (none is spent on it). The step then tries the nearest untried prefix inside
(lo, hi), alternating after and before the middle; if every prefix there is skipped, the result
names the range of candidates instead of one culprit.

The same function bisects upstream commits: n commits after a known-good one, `measure(k, r)`
measuring the tree at the k-th commit; `bisect_items` wraps that with labels.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from toolkit.analysis import stats
from toolkit.analysis.bisect_outcome import BisectResult, BisectStep, format_pct, mean_of, progress_picture
from toolkit.analysis.bisect_rule import step_design
from toolkit.errors import PatchbenchError

Measure = Callable[[int, int], "list[float] | None"]

GOOD = "good"
BAD = "bad"
SKIP = "skip"


class BaseNotMeasured(PatchbenchError):
    """The known-good end gave no value (its apply, build or every launch failed): nothing to compare with.
    The caller, who knows why (`VariantMeter.skipped`), says so (`because`)."""

    def because(self, why: str | None, **where) -> PatchbenchError:
        """The same failure with its cause (the apply/build error, the failed run and its log) and place."""
        return PatchbenchError(self.message + (f": {why}" if why else ""), **{"step": self.step, **where})


def max_builds_bound(n: int) -> int:
    """Most distinct prefixes one bisection measures without skips (base included)."""
    return math.ceil(math.log2(n + 1)) + 1 if n > 0 else 1


def bisect_stack(n_patches: int, measure: Measure, *, higher_is_better: bool = True,
                 threshold_pct: float = 5.0, initial_repeats: int = 3, max_repeats: int = 10,
                 alpha: float = 0.05, repeat_step: int = 2, confirm_repeats: int = 5,
                 full_stack_if_uncertain: bool = False, repair: bool = True,
                 labels: Sequence[str] | None = None,
                 base_label: str = "base", max_builds: int | None = None,
                 on_step: Callable[[BisectStep], None] | None = None,
                 direction: str = "worse", reference: str = "neighbour",
                 sequential: bool = False, ready: Callable[[int], bool] | None = None) -> BisectResult:
    """Find the first prefix worse (`direction="better"`: better) than the base by more than `threshold_pct` (see the module
    docstring). `measure(prefix_len, repeats)` returns `repeats` new values for that prefix, or None
    to skip it. `labels[i - 1]` names item i (patch file, commit). `max_builds` stops the search
    early (the result then names the remaining range). `on_step` sees each step as it is decided.
    `full_stack_if_uncertain` and `repair`: see the module docstring (and
    benchmarks/bisect_accuracy.py for what they cost and buy). Culprit-1 and culprit are topped up to
    `confirm_repeats` values (at most `max_repeats`, no new builds) for the `conviction`.
    `sequential`: a step's interval is the anytime-valid confidence sequence of
    `toolkit.analysis.sequential` (ratio of geometric means) instead of the fixed-sample t interval,
    so its good/bad decision keeps alpha however many top-ups it took (the fixed interval, looked at
    after every top-up, does not).
    `ready(prefix)`: prepare (apply, build) a prefix before its first launch; False skips it. It is asked
    before the reference is launched around a new probe, so a probe that cannot be built costs no reference
    launch, and the reference's launch just before the probe's first is not separated from it by the build.
    """
    n = int(n_patches)
    if n < 1:
        raise ValueError("bisect needs at least one item")
    if initial_repeats < 2:
        raise ValueError("initial_repeats must be at least 2 (a spread is needed)")
    max_repeats = max(max_repeats, initial_repeats)
    if labels is not None and len(labels) != n:
        raise ValueError(f"labels has {len(labels)} names for {n} items")
    thr = threshold_pct / 100.0
    if direction not in ("worse", "better"):
        raise ValueError("direction must be worse or better")
    if reference not in ("neighbour", "base"):
        raise ValueError("reference must be neighbour or base")
    design = step_design(threshold_pct=threshold_pct, initial_repeats=initial_repeats, max_repeats=max_repeats,
                         alpha=alpha) if sequential else None
    ref = [0]  # the prefix the step compares with: the base, or the nearest good prefix before it
    # what a step's outcome reads as: for a gain, "bad" is the state with it
    words = {GOOD: "good", BAD: "bad"} if direction == "worse" else {GOOD: "before the gain", BAD: "with the gain"}
    # The search measures the "loss" in the direction asked for; convictions use the real direction.
    moved_hib = higher_is_better if direction == "worse" else not higher_is_better
    moved = stats.SLOWER if direction == "worse" else stats.FASTER
    change_word = "regression" if direction == "worse" else "gain"

    cache: dict[int, list[float]] = {}
    order: list[int] = []  # the prefix of every value, in the order they were measured
    skipped: set[int] = set()
    counters = {"measurements": 0, "calls": 0}
    uncertain: list[int] = []
    steps: list[BisectStep] = []

    def label(p: int) -> str:
        if p == 0:
            return base_label
        return labels[p - 1] if labels is not None else f"#{p}"

    def get(p: int, k: int) -> bool:
        """Ask for k more values at p; False if p is (now) skipped."""
        if p in skipped:
            return False
        counters["calls"] += 1
        vals = measure(p, k)
        if vals is None or len(vals) == 0:
            if p not in cache:
                skipped.add(p)
            return False
        vals = [float(v) for v in vals]
        if not all(math.isfinite(v) for v in vals):
            raise PatchbenchError(f"bisect: non-finite measurement at prefix {p}: {vals}")
        cache.setdefault(p, []).extend(vals)
        order.extend([p] * len(vals))
        counters["measurements"] += len(vals)
        return True

    def since(x: int, y: int) -> list[float]:
        """x's values measured together with y's: x's launch just before y's first (when the launch just before
        it was x's) and every x launch after it. Older values of x were measured in another moment of the box
        and would read its drift as a change between x and y."""
        start = order.index(y) if y in cache else len(order)
        j = start - 1 if start > 0 and order[start - 1] == x else start
        return cache.get(x, [])[order[:j].count(x):]

    def window(x: int, y: int) -> tuple[list[float], list[float]]:
        """(x's values, y's values) measured in the same stretch of time: every value of the one measured
        later, and the other's from just before that one's first on (`since`); the latest `max_repeats` of each
        (a second pass re-reads prefixes first measured in the first)."""
        if x not in cache or (y in cache and order.index(y) < order.index(x)):
            a, b = cache.get(x, []), since(y, x)
        else:
            a, b = since(x, y), cache.get(y, [])
        return a[-max_repeats:], b[-max_repeats:]

    def together(x: int, y: int) -> tuple[list[float], list[float]]:
        """The values x and y are compared by: their `window`, or every value of each (the latest
        `max_repeats`) when one side could not be measured again."""
        a, b = window(x, y)
        if not a or not b:
            a, b = cache.get(x, [])[-max_repeats:], cache.get(y, [])[-max_repeats:]
        return a, b

    def top_up(p: int, want: int) -> bool:
        have = len(cache.get(p, ()))
        return have >= want or get(p, want - have)

    def loss_of(p: int) -> tuple[float, tuple[float, float]]:
        a, b = together(ref[0], p)
        if sequential and min(*a, *b) > 0:
            from toolkit.analysis import sequential as seq

            ratio, lo, hi = seq.interval(a, b, design=design)
            lo, hi = (lo, hi) if math.isfinite(hi) else (math.nan, math.nan)
        else:
            ratio = (sum(b) / len(b)) / (sum(a) / len(a))
            lo, hi = stats.ratio_ci(a, b, confidence=1.0 - alpha)
        if moved_hib:
            return 1.0 - ratio, (1.0 - hi, 1.0 - lo)
        return ratio - 1.0, (lo - 1.0, hi - 1.0)

    def mean(p: int) -> float:
        return mean_of(cache[p])

    def classify(p: int) -> tuple[str, bool]:
        """Measure p against the base until decided: (good|bad|skip, certain). Uncertain: the
        point estimate's side of the threshold."""
        r = ref[0]
        if p in skipped:
            return SKIP, True
        if p not in cache and ready is not None and not ready(p):  # built first: no reference launch spent on it
            skipped.add(p)
            return SKIP, True
        # the reference is launched around the probe's first launches: r p p r
        if p not in cache and (not order or order[-1] != r):
            get(r, 1)
        have = len(window(r, p)[1]) if p in cache else 0
        if have < initial_repeats and not get(p, initial_repeats - have) and p not in cache:
            return SKIP, True
        have = len(window(r, p)[0])
        if have < initial_repeats:
            get(r, initial_repeats - have)
        looks = 0
        while True:
            loss, (llo, lhi) = loss_of(p)
            if math.isfinite(llo) and llo > thr:
                return BAD, True
            if math.isfinite(lhi) and lhi < thr:
                return GOOD, True
            a, b = window(r, p)
            np_, nb = len(b), len(a)
            asks = []
            if np_ < max_repeats:
                asks.append((p, min(repeat_step, max_repeats - np_)))
            if nb < max_repeats and nb <= np_:
                asks.append((r, min(repeat_step, max_repeats - nb)))
            looks += 1
            grew = False
            for q, k in (asks[::-1] if looks % 2 == 0 else asks):  # alternating order: a drift hits both sides
                grew = get(q, k) or grew
            if not grew:
                return (BAD if loss > thr else GOOD), False

    def decide(p: int, lo: int, hi: int, use_full: bool, limit: int | None) -> tuple[str, bool, int]:
        """classify(p); when it stays uncertain, side with the closer of the measured neighbours
        lo and hi (the whole stack is measured first if hi is still virtual). Returns (outcome,
        certain, hi): hi becomes n when the whole stack was measured bad on the way."""
        outcome, certain = classify(p)
        if outcome != SKIP:  # what p's step compared, before the whole stack's launches add to its reference's
            shown[p] = (loss_of(p), together(ref[0], p))
        if certain or outcome == SKIP:
            return outcome, certain, hi
        if p not in uncertain:
            uncertain.append(p)
        room = limit is None or n in cache or len(cache) < limit
        if use_full and hi > n and p != n and n not in skipped and room:
            out_n, certain_n = classify(n)
            record(n, lo, hi, out_n, certain_n)
            if out_n == BAD:
                hi = n
            elif not certain_n and n not in uncertain:
                uncertain.append(n)
        if hi <= n:
            outcome = BAD if abs(mean(p) - mean(hi)) < abs(mean(p) - mean(lo)) else GOOD
        return outcome, False, hi

    current_pass = [1]
    shown: dict[int, tuple] = {}  # prefix -> (loss, ci), (reference's values, its values) its step decided with

    def record(p: int, lo: int, hi: int, outcome: str, certain: bool) -> None:
        pic = progress_picture(n, lo, hi, p)
        if current_pass[0] > 1:
            pic = f"(pass {current_pass[0]}) {pic}"
        if outcome == SKIP:
            line = f"step {len(steps) + 1:>2} {pic} prefix {p:>3}/{n} {label(p)}: skipped (cannot measure)"
            st = BisectStep(len(steps) + 1, p, lo, hi, SKIP, label=label(p), line=line,
                            pass_no=current_pass[0], reference=label(ref[0]))
        else:
            (loss, ci), (base, vals) = shown.pop(p, None) or (loss_of(p), together(ref[0], p))
            # shown as the change of the metric itself (ratio - 1), whatever its direction
            sign = -1.0 if moved_hib else 1.0
            chg, chg_ci = sign * loss * 100, sorted((sign * ci[0] * 100, sign * ci[1] * 100))
            line = (f"step {len(steps) + 1:>2} {pic} prefix {p:>3}/{n} {label(p)}: "
                    f"{stats.format_value(mean_of(vals))} vs {'base' if ref[0] == 0 else label(ref[0])} "
                    f"{stats.format_value(mean_of(base))}: "
                    f"{format_pct(chg)} [{format_pct(chg_ci[0])}, {format_pct(chg_ci[1])}] "
                    f"n={len(vals)}/{len(base)}: {words[outcome]}{'' if certain else ' (uncertain)'}")
            st = BisectStep(len(steps) + 1, p, lo, hi, outcome, len(vals), len(base), mean_of(vals), mean_of(base),
                            loss * 100, (ci[0] * 100, ci[1] * 100), certain, label(p), line,
                            current_pass[0], label(ref[0]))
        steps.append(st)
        if on_step is not None:
            on_step(st)

    if not top_up(0, initial_repeats):
        raise BaseNotMeasured(f"the base ({base_label}) could not be measured", step="bisect")

    def search(use_full: bool, limit: int | None) -> tuple[int, int, bool]:
        """The bisection proper over the cache so far: (lo, hi, stopped: a new prefix was needed
        with `limit` distinct prefixes measured already)."""
        lo, hi = 0, n + 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            order = [mid]
            for d in range(1, hi - lo):
                order += [q for q in (mid + d, mid - d) if lo < q < hi]
            outcome = SKIP
            for p in order:
                if p in skipped:
                    continue
                if limit is not None and p not in cache and len(cache) >= limit:
                    return lo, hi, True
                ref[0] = lo if reference == "neighbour" else 0
                outcome, certain, hi = decide(p, lo, hi, use_full, limit)
                record(p, lo, hi, outcome, certain)
                if outcome != SKIP:
                    break
            if outcome == SKIP:
                break  # every prefix in (lo, hi) is skipped
            if outcome == BAD:
                hi = p
            else:
                lo = p
        return lo, hi, False

    def convict(lo: int, hi: int) -> stats.Comparison:
        if sequential:
            return convict_sequentially(lo, hi)
        want = min(max(confirm_repeats, initial_repeats), max_repeats)
        for side in (0, 1):
            have = len(window(lo, hi)[side])
            if have < want:
                get((lo, hi)[side], want - have)
        a, b = together(lo, hi)
        return stats.compare_values(a, b, higher_is_better=higher_is_better, alpha=alpha)

    def convict_sequentially(lo: int, hi: int) -> stats.Comparison:
        """The step lo -> hi by the confidence sequence the search decided with: topped up one value a
        side (the smaller first) until its interval excludes 1, or max_repeats; valid at any of these
        looks (a fixed-sample test of 3 vs 3 could never convict, and looked at after each top-up would
        not keep alpha)."""
        import dataclasses

        from toolkit.analysis import sequential as seq

        def as_comparison(verdict: str, ratio: float, rlo: float, rhi: float) -> stats.Comparison:
            c = stats.compare_values(*together(lo, hi), higher_is_better=higher_is_better, alpha=alpha)
            return dataclasses.replace(c, verdict=verdict, ratio=ratio, ci_low=rlo, ci_high=rhi, p_value=math.nan)

        while True:
            a, b = window(lo, hi)
            if not a or not b:  # one side measured only before the other: measure it again
                if not get(lo if not a else hi, 1):
                    a, b = together(lo, hi)
                    return stats.compare_values(a, b, higher_is_better=higher_is_better, alpha=alpha)
                continue
            if min(*a, *b) <= 0:
                return stats.compare_values(a, b, higher_is_better=higher_is_better, alpha=alpha)
            ratio, rlo, rhi = seq.interval(a, b, design=design)
            if math.isfinite(rhi) and (rlo > 1.0 or rhi < 1.0):
                better = (rlo > 1.0) == (higher_is_better is not False)
                return as_comparison(stats.FASTER if better else stats.SLOWER, ratio, rlo, rhi)
            side, other = ((lo, len(a)), (hi, len(b))) if len(a) <= len(b) else ((hi, len(b)), (lo, len(a)))
            if not (side[1] < max_repeats and get(side[0], 1)):
                if not (other[1] < max_repeats and get(other[0], 1)):
                    finite = math.isfinite(rhi)
                    return as_comparison(stats.NOT_SIGNIFICANT, ratio, rlo if finite else math.nan,
                                         rhi if finite else math.nan)

    lo, hi, stopped = search(full_stack_if_uncertain, max_builds)
    repaired = False
    if hi == lo + 1 and hi <= n and repair and convict(lo, hi).verdict != moved:
        # a weak conviction after uncertain steps: search again over the same cache, this time
        # measuring the whole stack to settle uncertain steps by their measured neighbours
        current_pass[0] = 2
        budget = 2 * max_builds_bound(n) if max_builds is None else max_builds
        lo2, hi2, stopped2 = search(True, max(budget, len(cache)))
        repaired = True
        if hi2 == lo2 + 1 and hi2 <= n and convict(lo2, hi2).verdict == moved:
            lo, hi, stopped = lo2, hi2, stopped2

    culprit = candidates = None
    good_values = bad_values = ()
    conviction = None
    confirmed = False
    if hi == lo + 1 and hi <= n:
        culprit = hi
        conviction = convict(lo, hi)
        good_values, bad_values = map(tuple, together(lo, hi))
        confirmed = conviction.verdict == moved
        msg = (f"{'culprit' if direction == 'worse' else 'the gain'}: {label(hi)} (item {hi}/{n}): "
               f"{stats.format_comparison(conviction)} against {label(lo)}")
        if not confirmed:
            msg += f" (weak: that step alone is not a significant {change_word}"
            msg += f"; uncertain steps at {', '.join(map(str, uncertain))})" if uncertain else ")"
        if repaired:
            msg += " (after a second pass with the whole stack measured)"
    elif hi == lo + 1:
        against = "the good item before it" if reference == "neighbour" else base_label
        msg = f"no item makes the metric {direction} than {against} by more than {threshold_pct:g}%"
        if uncertain:  # not shown either way there: the interval still reached past the threshold
            msg += (f" (not settled at {', '.join(label(p) for p in uncertain)}: the interval still reached past "
                    f"{threshold_pct:g}% after {max_repeats} values a side; taken by the point estimate)")
    else:
        candidates = (lo + 1, min(hi, n))
        why = "build limit reached" if stopped else "every prefix between them was skipped"
        tail = " (or none)" if hi > n else ""
        if candidates[0] == candidates[1]:  # the last item, or none of them
            alone = "build limit reached" if stopped else "it could not be measured"
            msg = f"culprit is item {candidates[0]}{tail} ({label(candidates[0])}): {alone}"
        else:
            msg = (f"culprit is one of items {candidates[0]}..{candidates[1]}{tail} "
                   f"({label(candidates[0])} .. {label(candidates[1])}): {why}")
    return BisectResult(
        n=n, culprit=culprit, culprit_label=label(culprit) if culprit else None,
        candidates=candidates, confirmed=confirmed, repaired=repaired, good_values=good_values,
        bad_values=bad_values,
        base_values=tuple(cache[0]), conviction=conviction, steps=tuple(steps), builds=len(cache),
        measurements=counters["measurements"], calls=counters["calls"],
        skipped=tuple(sorted(skipped)), uncertain=tuple(uncertain),
        values={k: tuple(v) for k, v in sorted(cache.items())}, threshold_pct=threshold_pct,
        higher_is_better=higher_is_better, message=msg)


def bisect_items(items: Sequence[str], measure: Measure, **kwargs) -> BisectResult:
    """Bisect `items[1:]` (commits, patches) after the known-good `items[0]`: `measure(k, r)`
    measures the state after items[k] (k = 0: the good one). Keyword arguments as `bisect_stack`."""
    if len(items) < 2:
        raise ValueError("bisect_items needs a good item and at least one more")
    return bisect_stack(len(items) - 1, measure, labels=list(items[1:]), base_label=str(items[0]),
                        **kwargs)
