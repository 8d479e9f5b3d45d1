"""The report's quality section: per variant and quality point, the answers' verdict against the
baseline (toolkit.analysis.quality_runs) and the first divergent prompts side by side (the
baseline's answer and the variant's). Pure rendering over what `collect` read."""

from __future__ import annotations

from typing import Any

from toolkit.analysis import answers_verdict, quality_runs
from toolkit.analysis.compare import NOT_CHECKED
from toolkit.report.tables import esc, html_table, md_table


def collect(sel) -> dict:
    """{variant: [{"point", "verdict", "text", "examples": [{id, prompt, reference, variant}]}]},
    the baseline against itself first ("NAME (against itself)": its floor)."""
    out: dict = {f"{name} (against itself)": [{"point": p, "verdict": q.verdict, "text": q.text, "examples": [],
                                              "rule": q.rule}
                                             for p, q in per.items()]
                 for name, per in quality_runs.reference_floor(sel).items()}
    for variant, per in quality_runs.verdicts(sel).items():
        out[variant] = [{"point": p, "verdict": q.verdict, "text": q.text, "rule": q.rule,
                         "examples": quality_runs.examples(sel, variant, p, q) if p else []}
                        for p, q in per.items()]
    return {v: items for v, items in out.items() if items}


def gates(sel) -> dict:
    """{variant: {"text", "rule"}}: the accuracy gate's verdict of each variant that ran it, with the
    legend of the parameters it was computed with (toolkit.analysis.gate_verdict)."""
    return {v: {"text": g.text, "rule": g.rule} for v, g in quality_runs.gate_verdicts(sel).items()}


def verdict_at(data: dict, variant: str, point: int) -> str | None:
    """The answers' verdict at `point`, else a broken/changed one of another point (named), else, where the
    check ran at other points only, that it did not run here (as compare says it: such a point never
    reads as a checked one)."""
    items = data.get(variant, [])
    here = next((i["verdict"] for i in items if i["point"] == point), None)
    if here is not None:
        return here
    bad = sorted((i for i in items if i["verdict"] in ("broken output", "answers changed")),
                 key=lambda i: i["verdict"] != "broken output")
    return f"{bad[0]['verdict']} (at c={bad[0]['point']})" if bad else (NOT_CHECKED if items else None)


def _legends(data: dict) -> list[str]:
    """Each rule the verdicts were computed by, once (an item without one: the fixed verdict's)."""
    return list(dict.fromkeys(i.get("rule") or answers_verdict.legend() for items in data.values() for i in items))


def _short(text: str, n: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def markdown(data: dict, baseline: str, gate: dict | None = None) -> list[str]:
    gate = gate or {}
    if not data and not gate:
        return []
    lines = ["", "### Answers (output check)", ""]
    for variant, g in gate.items():
        lines.append(f"- **{variant}** accuracy gate: {g['text']}")
    for variant, items in data.items():
        for item in items:
            where = f" at c={item['point']}" if item["point"] else ""
            lines.append(f"- **{variant}**{where}: {item['text']}")
            if item["examples"]:
                rows = [[_short(e["prompt"], 80), _short(e["reference"]), _short(e["variant"])]
                        for e in item["examples"]]
                lines += ["", *("  " + line for line in md_table(["prompt", baseline, variant], rows))]
                lines.append("")
    lines += ["", *(f"{rule}." for rule in dict.fromkeys(g["rule"] for g in gate.values() if g["rule"]))]
    if data:
        lines += ["", *(f"{rule}." for rule in _legends(data))]
    return lines


def html_section(data: dict, baseline: str, gate: dict | None = None) -> list[str]:
    gate = gate or {}
    if not data and not gate:
        return []
    parts = ["<h2>Answers (output check)</h2><ul>"]
    parts += [f"<li><b>{esc(v)}</b> accuracy gate: {esc(g['text'])}</li>" for v, g in gate.items()]
    for variant, items in data.items():
        for item in items:
            where = f" at c={item['point']}" if item["point"] else ""
            parts.append(f"<li><b>{esc(variant)}</b>{esc(where)}: {esc(item['text'])}")
            if item["examples"]:
                parts.append(html_table(["prompt", baseline, variant],
                                        [[e["prompt"], e["reference"], e["variant"]] for e in item["examples"]],
                                        'class="answers"'))
            parts.append("</li>")
    parts.append("</ul>")
    parts += [f'<p class="note">{esc(rule)}.</p>' for rule in dict.fromkeys(g["rule"] for g in gate.values() if g["rule"])]
    if data:
        parts += [f'<p class="note">{esc(rule)}.</p>' for rule in _legends(data)]
    return parts


def combined(verdict: str, q: Any) -> str:
    return f"{verdict}, {q}" if q and verdict else verdict
