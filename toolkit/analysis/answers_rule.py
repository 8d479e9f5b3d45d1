"""Which launch of a candidate asks its answers, when launches are sequential: another launch asks
only while the candidate's sequential answers verdict (toolkit.analysis.answers_sequential) against
its reference is unsettled at some quality point.

`UntilSettled(store, name, identity, reference, design)` is a toolkit.run.quality.AnswerRule: the
launch (of recipe `name`, run identity `identity`) reads the earlier launches of its configuration
that answered the same (toolkit.run.quality.answered_before, oldest first, at most max_looks) and
the reference's answered launches now (`reference()`: its runs), judges every point, and skips the
check when every point is settled (a skipped run names the launches that answered for it, as the
fixed rule's do). Answers ride on launches made for speed: this rule never adds a launch. Its
`record` goes into the run (`extra.quality.rule`), and toolkit.analysis.quality_runs judges a
candidate whose runs carry it by the same design. Effects: reads the store and answer artifacts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from toolkit.analysis import answers_sequential as seq_answers
from toolkit.results.records import RunRow


@dataclass
class UntilSettled:
    store: object
    name: str
    identity: str
    reference: Callable[[], Sequence[RunRow]]
    design: seq_answers.Design = seq_answers.Design()

    @property
    def record(self) -> dict:
        return {"sequential": self.design.to_dict()}

    def __call__(self, attempt, key: list) -> tuple[str, list] | None:
        from toolkit.analysis import quality_runs
        from toolkit.run.quality import answered_before, read_artifact

        before = answered_before(self.store, self.name, self.identity, key, attempt.run_id, self.design.max_looks)
        if len(before) < self.design.min_looks:
            return None
        cand = quality_runs.launches_of([(rid, "ok", read_artifact(path)) for rid, path, *_ in before])
        ref = quality_runs.launches(self.reference(), sane_only=True)
        if not cand:
            return None
        verdicts = {p: seq_answers.judge(p, ref.get(p, []), cand[p], self.design) for p in sorted(cand)}
        if any(seq_answers.more_needed(v, self.design) for v in verdicts.values()):
            return None
        said = "; ".join(f"c={p}: {_state(v)}" for p, v in verdicts.items())
        return (f"no more answers needed ({said}; sequential answers, up to {self.design.max_looks} looks) from "
                f"{len(before)} earlier launch(es) of this configuration ({', '.join(r[0][:8] for r in before)})"), before


def _state(v) -> str:
    if v.verdict == seq_answers.av.TOO_FEW:
        return f"{v.looks} look(s) taken, the verdict waits for the reference's own launches"
    return f"{v.verdict} after {v.looks} look{'s' if v.looks != 1 else ''}"


def for_recipe(store, prepared, identity: str, reference: Callable[[], Sequence[RunRow]],
               design: seq_answers.Design | None = None) -> UntilSettled | None:
    """The rule for a candidate's launches; None (the recipe's fixed rule) when it has no answers check
    or sets `[quality] launches` itself (0 turns the check off; N asks N launches, as asked)."""
    q = prepared.recipe.quality
    if q is None or q.launches is not None:
        return None
    return UntilSettled(store, prepared.name, identity, reference, design or seq_answers.Design())
