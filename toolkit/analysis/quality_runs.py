"""The quality verdicts of a selection: stored answers (each run's `quality.json`, written by
toolkit.run.quality) -> toolkit.analysis.answers_verdict.judge per variant and point. Reads files; the runs
are the ones toolkit.analysis.selection chose (the baseline of the selection is the reference).

`verdicts(sel)` -> {variant: {point: QualityVerdict}} (empty when no run of the variant ran the
check); `self_verdict(runs)` / `reference_floor(sel)`: a recipe against itself (its floor);
`examples(sel, variant, point)`: the first prompts where the variant departed, both answers side by side.
A candidate whose newest run was asked under the sequential rule (`extra.quality.rule`, toolkit.analysis.answers_rule)
is judged by toolkit.analysis.answers_sequential with that run's design; `legends(answers)` names each rule used.
The gate's verdict goes wherever the answers' go: `gate_verdicts(sel)` (compare, report),
`meter_gates` (attribute, bisect: each prefix against the base), `gate_of` (sweep: each variant
against the default configuration).
"""

from __future__ import annotations

from typing import Sequence

from toolkit.analysis.answers_verdict import FAILED, Launch, QualityVerdict, floor, judge
from toolkit.results.records import RunRow


def _artifact(run: RunRow) -> dict | None:
    from toolkit.run.quality import read_artifact

    return read_artifact(((run.extra or {}).get("quality") or {}).get("artifact"))


def status(run: RunRow) -> str | None:
    return ((run.extra or {}).get("quality") or {}).get("status")


def answered(runs: Sequence[RunRow]) -> list[tuple[str, str | None, dict]]:
    """(run id, check status, artifact) of every launch whose answers these runs stand for, each
    once, oldest first: a run's own answers, and for a run that skipped the check the earlier
    launches of its configuration that answered for it (`answers_from`), so any selection of a
    configuration's runs carries its answers."""
    from toolkit.run.quality import read_artifact

    out: dict[str, tuple[str, str, str | None, dict]] = {}
    for run in runs:
        own = _artifact(run)
        if own:
            out.setdefault(run.run_id, (run.started_at or "", run.run_id, status(run), own))
        for rid, path, *when in ((run.extra or {}).get("quality") or {}).get("answers_from") or []:
            art = None if rid in out else read_artifact(path)
            if art:
                out[rid] = ((when or [""])[0] or "", rid, "ok", art)
    return [entry[1:] for entry in sorted(out.values(), key=lambda e: e[0])]


def _launches(sources, *, sane_only: bool) -> dict[int, list[Launch]]:
    out: dict[int, list[Launch]] = {}
    for rid, state, art in sources:
        if sane_only and state != "ok":
            continue
        for point, rows in (art.get("points") or {}).items():
            out.setdefault(int(point), []).append(Launch(
                rid, tuple(tuple(r["ids"]) for r in rows), tuple(r.get("degenerate") for r in rows),
                bool(art.get("informative", True)), art.get("why"),
                (art.get("prompts_digest"), art.get("max_tokens"))))
    return out


def launches_of(sources, *, sane_only: bool = False) -> dict[int, list[Launch]]:
    """Per point, one Launch per (run id, check status, artifact) of `sources` (as `answered` gives)."""
    return _launches(sources, sane_only=sane_only)


def design_of(runs: Sequence[RunRow]):
    """The sequential answers design the newest of `runs` was asked under (`extra.quality.rule`), or None
    (asked by the fixed rule: judged by the fixed verdict)."""
    from toolkit.analysis.answers_sequential import Design

    for run in reversed(list(runs)):
        rule = (((run.extra or {}).get("quality") or {}).get("rule") or {}).get("sequential")
        if rule:
            return Design.from_dict(rule)
    return None


def launches(runs: Sequence[RunRow], *, sane_only: bool) -> dict[int, list[Launch]]:
    """Per point, one Launch per launch that answered for these runs (`sane_only`: checks that were ok)."""
    return _launches(answered(runs), sane_only=sane_only)


def _failed(runs: Sequence[RunRow]) -> str | None:
    reasons = [((r.extra or {}).get("quality") or {}).get("reason") for r in runs if status(r) == "failed"]
    return reasons[-1] if reasons else None


def _judge(ref: dict[int, list[Launch]], cand: dict[int, list[Launch]], candidate: Sequence[RunRow],
           alpha: float) -> dict[int, QualityVerdict]:
    if not cand:
        why = _failed(candidate)
        return {0: QualityVerdict(0, FAILED, f"{FAILED}: {why}")} if why else {}
    design = design_of(candidate)
    if design is not None:  # asked launch by launch: judged by the same sequential rule
        from toolkit.analysis import answers_sequential

        return {p: answers_sequential.judge(p, ref.get(p, []), cand[p], design) for p in sorted(cand)}
    return {p: judge(p, ref.get(p, []), cand[p], alpha=alpha) for p in sorted(cand)}


def judge_runs(reference: Sequence[RunRow], candidate: Sequence[RunRow], *,
               alpha: float = 0.05) -> dict[int, QualityVerdict]:
    return judge_launches(launches(reference, sane_only=True), candidate, alpha=alpha)


def judge_launches(ref: dict[int, list[Launch]], candidate: Sequence[RunRow], *,
                   alpha: float = 0.05) -> dict[int, QualityVerdict]:
    """judge_runs with the reference's launches read already (`launches(reference, sane_only=True)`),
    for one reference judged against many candidates."""
    return _judge(ref, launches(candidate, sane_only=False), candidate, alpha)


def verdicts(sel, *, alpha: float = 0.05) -> dict[str, dict[int, QualityVerdict]]:
    ref = launches(sel.runs[sel.recipes[0]], sane_only=True)  # read once for every variant
    return {v: judge_launches(ref, sel.runs[v], alpha=alpha) for v in sel.recipes[1:]}


def self_verdict(runs: Sequence[RunRow], *, alpha: float = 0.05) -> dict[int, QualityVerdict]:
    """A recipe against itself. With three or more launches that answered: its newest launch against
    the others (launches it did not pick as its reference: a real test of reproducibility). With two:
    their floor (on how many prompts they differ), and "too few launches" for a self-check, never a
    "same answers" that judging them against themselves would give by construction."""
    sources = answered(runs)
    if len(sources) < 2:
        return {}
    if len(sources) > 2:
        return _judge(_launches(sources[:-1], sane_only=True), _launches(sources[-1:], sane_only=False), runs, alpha)
    return {p: floor(p, pair) for p, pair in sorted(_launches(sources, sane_only=False).items())}


def reference_floor(sel, *, alpha: float = 0.05) -> dict[str, dict[int, QualityVerdict]]:
    """{the selection's baseline: its self_verdict} (empty when fewer than two launches answered)."""
    base = sel.recipes[0]
    own = self_verdict(sel.runs[base], alpha=alpha)
    return {base: own} if own else {}


def examples(sel, variant: str, point: int, verdict: QualityVerdict, limit: int = 3) -> list[dict]:
    """The first prompts where `variant` departed at `point`: prompt, reference answer, variant answer."""
    ref = answered(sel.runs[sel.recipes[0]])
    cand = answered(sel.runs[variant])
    if not ref or not cand:
        return []
    ref, cand = ref[-1][2], cand[-1][2]
    r_rows, c_rows = ref["points"].get(str(point)) or [], cand["points"].get(str(point)) or []
    texts = cand.get("prompt_text") or {}
    indices = verdict.divergent or tuple(i for i, row in enumerate(c_rows) if row.get("degenerate"))
    out = []
    for i in indices[:limit]:
        if i < len(r_rows) and i < len(c_rows):
            pid = c_rows[i]["id"]
            out.append({"id": pid, "prompt": texts.get(pid, ""), "reference": r_rows[i]["text"],
                        "variant": c_rows[i]["text"]})
    return out


def lines(answers: dict) -> list[str]:
    """One line per distinct verdict text, naming where it holds: "VARIANT c=16: broken output (...)",
    "A c=1,16; B c=1,16: not informative: ..." (the same reason is said once)."""
    groups: dict[str, dict[str, list[int]]] = {}
    for v, per in answers.items():
        for p, q in per.items():
            groups.setdefault(q.text, {}).setdefault(v, []).append(p)
    return ["; ".join(f"{v} c={','.join(map(str, pts))}" if any(pts) else v for v, pts in where.items())
            + f": {text}" for text, where in groups.items()]


def _per_prefix(store, log: Sequence, names: Sequence[str], judge) -> dict:
    """attribute/bisect: `judge(base runs, prefix runs)` for each measured prefix (`log`: (label, env
    key, values, run ids), label "prefixK") against the base (prefix0), keyed "+K NAME"; prefixes
    whose verdict is empty or None are left out."""
    runs = {label: store.runs(run_ids=ids) for label, _, _, ids in log}
    base = runs.get("prefix0")
    if not base:
        return {}
    out = {}
    for label, rows in runs.items():
        if label.startswith("prefix") and label != "prefix0":
            k = int(label[len("prefix"):])
            verdict = judge(base, rows)
            if verdict:
                out[f"+{k} {names[k - 1] if 0 < k <= len(names) else label}"] = verdict
    return out


def meter_verdicts(store, log: Sequence, names: Sequence[str]) -> dict[str, dict[int, QualityVerdict]]:
    """attribute/bisect: the answers' verdicts of each measured prefix against the base, keyed "+K NAME"."""
    return _per_prefix(store, log, names, judge_runs)


_RANK = ("broken output", "answers changed", "check failed", "not informative", "answers not settled",
         "too few launches", "same answers")


def worst(per: dict[int, QualityVerdict]) -> str | None:
    """The worst verdict over a variant's quality points (broken > changed > ... > same)."""
    found = [q.verdict for q in per.values()]
    return next((v for v in _RANK if v in found), None)


def _eval(run: RunRow) -> dict | None:
    return ((run.extra or {}).get("quality") or {}).get("eval")


def newest_eval(runs: Sequence[RunRow], *, ok: bool = False) -> tuple[RunRow, dict] | None:
    """(the run, its gate evaluation) of the newest of `runs` that ran the gate tier (`ok`: whose
    evaluation succeeded: a reference's failed newest one does not hide an older good one)."""
    return next(((r, e) for r in reversed(list(runs)) if (e := _eval(r)) and (not ok or e.get("status") == "ok")), None)


def gate_of(candidate: Sequence[RunRow], reference: Sequence[RunRow]):
    """The gate's verdict of the candidate's newest evaluation against the reference's newest, with
    the thresholds of the candidate's recipe (toolkit.analysis.gate_verdict.judge); None when no
    candidate run ran the gate tier."""
    from toolkit.analysis.gate_verdict import judge as judge_gate

    found = newest_eval(candidate)
    if found is None:
        return None
    run, cand = found
    ref = newest_eval(reference, ok=True) or newest_eval(reference)
    spec = (run.recipe_resolved or {}).get("quality") or {}
    return judge_gate(cand, ref[1] if ref else None, min_accuracy=spec.get("min_accuracy"),
                      max_drop=spec.get("max_drop"))


def gate_verdicts(sel) -> dict:
    """{variant: GateVerdict} for variants whose newest run ran the gate tier (thresholds from its recipe)."""
    base = sel.runs[sel.recipes[0]]
    out = {}
    for v in sel.recipes[1:]:
        g = gate_of(sel.runs[v], base)
        if g is not None:
            out[v] = g
    return out


def meter_gates(store, log: Sequence, names: Sequence[str]) -> dict:
    """attribute/bisect: the gate's verdict of each measured prefix against the base (prefix0),
    keyed "+K NAME" as meter_verdicts."""
    return _per_prefix(store, log, names, lambda base, rows: gate_of(rows, base))


def legends(answers: dict) -> list[str]:
    """The legend of each rule the verdicts of `answers` ({name: {point: QualityVerdict}}) were computed
    by, once each: the fixed verdict's (toolkit.analysis.answers_verdict.legend) and each sequential design's."""
    from toolkit.analysis.answers_verdict import legend

    rules = [q.rule or legend() for per in answers.values() for q in per.values()]
    return list(dict.fromkeys(rules)) or [legend()]


def gate_lines(gates: dict) -> list[str]:
    """"NAME: the gate's verdict", one per entry of `gates` ({name: GateVerdict})."""
    return [f"{name}: {g.text}" for name, g in gates.items()]


def gate_rules(gates: dict) -> list[str]:
    """Each distinct rule (the legend of the parameters the verdicts were computed with), once."""
    return list(dict.fromkeys(g.rule for g in gates.values() if g.rule))
