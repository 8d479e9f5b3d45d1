"""`MissingResults`: some recipes have no run that counts (toolkit.analysis.selection), said so that
a user who ran them learns why none counts (their runs failed, were interrupted, measured another
definition, ...) instead of being told to run them first."""

from __future__ import annotations

from typing import Mapping, Sequence

from toolkit.errors import BadInput

FIRST_RUN = "run them first, or compare with --run"


def _stopped(name: str, runs: Sequence) -> str:
    """"its stored runs: 2 failed, 1 interrupted (newest 1295de2f failed: server crashed: ...)"."""
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.status] = counts.get(r.status, 0) + 1
    said = ", ".join(f"{n} {s}" for s, n in counts.items())
    newest = runs[-1]
    error = (newest.error or "no error recorded").splitlines()[0] if newest.error else "no error recorded"
    error = error if len(error) <= 200 else error[:197] + "..."
    return f"its stored run{'s' if len(runs) != 1 else ''}: {said} (newest {newest.run_id[:8]} {newest.status}: {error})"


class MissingResults(BadInput):
    """Some recipes have no usable runs. `recipes` lists them, in the order given; `reasons` says,
    per recipe, why stored runs did not count; `stopped` holds its runs left out for their status
    (failed, interrupted, invalid, running), oldest first."""

    def __init__(self, recipes: Sequence[str], detail: str = "", *, reasons: Mapping[str, set] | None = None,
                 stopped: Mapping[str, Sequence] | None = None) -> None:
        self.recipes = list(recipes)
        self.detail = detail
        self.reasons = {n: set(v) for n, v in (reasons or {}).items()}
        self.stopped = {n: list(v) for n, v in (stopped or {}).items()}
        message, hint = self._compose()
        super().__init__(message, hint=hint)

    def _compose(self) -> tuple[str, str]:
        names = ", ".join(self.recipes)
        parts = [self.detail] if self.detail else []
        for n in self.recipes:
            why = sorted(self.reasons.get(n, ()))
            if self.stopped.get(n):
                why.append(_stopped(n, self.stopped[n]))
            if why:
                parts.append(f"{n}: {', '.join(why)}")
        msg = f"no ok, verified results for recipe{'s' if len(self.recipes) > 1 else ''} {names}"
        ran = [n for n in self.recipes if self.reasons.get(n) or self.stopped.get(n)]
        hint = (f"`patchbench results {ran[0]}` lists its runs and their logs; fix what stopped them and run again"
                if len(ran) == len(self.recipes) else FIRST_RUN)
        return msg + (f" ({'; '.join(parts)})" if parts else ""), hint

    def with_stopped(self, runs: Sequence) -> "MissingResults":
        """The same refusal, also naming `runs` (the recipes' runs a status left out: failed,
        interrupted, running), oldest first."""
        for r in runs:
            if r.recipe in self.recipes and r not in self.stopped.get(r.recipe, []):
                self.stopped.setdefault(r.recipe, []).append(r)
        for n in self.stopped:
            self.stopped[n].sort(key=lambda r: r.started_at or "")
        self.message, self.hint = self._compose()
        self.args = (self.message,)
        return self
