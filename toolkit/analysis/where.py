"""Where an evidence-derived metric was measured, over the runs an analysis uses.

A run stores, per evidence-derived metric, the sentence `toolkit.run.evidence.metrics_source`
wrote into its extra["evidence_metrics_source"] ("from 12 eager calls, outside CUDA graphs").
`measured_where` merges those of several runs into one sentence per metric ("from 11-14 eager calls
per run, ..."); compare and report print it beside the value. Pure: reads RunRow.extra.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

_FROM = re.compile(r"^from (\d+) (.*)$")


def measured_where(runs: Iterable) -> dict[str, str]:
    """metric -> one sentence for all `runs` (those without a source for it are left out)."""
    texts: dict[str, list[str]] = {}
    for run in runs:
        for metric, text in ((getattr(run, "extra", None) or {}).get("evidence_metrics_source") or {}).items():
            texts.setdefault(metric, []).append(str(text))
    return {metric: _merge(values) for metric, values in texts.items()}


def where_by_recipe(runs_by_recipe: Mapping[str, Iterable]) -> dict[tuple[str, str], str]:
    """(recipe, metric) -> sentence, for a selection's runs (`Selection.runs`)."""
    return {(name, metric): text for name, runs in runs_by_recipe.items()
            for metric, text in measured_where(runs).items()}


def _merge(values: list[str]) -> str:
    parsed = [_FROM.match(v) for v in values]
    if len(set(values)) == 1:
        return values[0] + (" per run" if len(values) > 1 else "")
    if all(parsed) and len({m.group(2) for m in parsed}) == 1:
        counts = sorted(int(m.group(1)) for m in parsed)
        return f"from {counts[0]}-{counts[-1]} {parsed[0].group(2)} per run"
    return "; ".join(sorted(set(values)))
