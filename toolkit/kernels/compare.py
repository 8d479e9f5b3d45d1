"""`patchbench compare BASE CAND ... --kernels-table`: the stored kernel tables of each variant against
the baseline's, per shape, for every (op, backend) both measured: the baseline's newest record against
the candidate's newest one timed on the same GPU key with the same trial settings
(toolkit/kernels/pairing.py); where there is none, what differed and no verdict. Reads
$PATCHBENCH_HOME/kernels only. Returns what to print and the JSON form."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from toolkit.analysis import stats
from toolkit.errors import BadInput
from toolkit.kernels import pairing, records
from toolkit.kernels.table import WRONG, compare, render_compare


def compare_recipes(home: Path, names: list[str], *, op: str | None = None, backend: str | None = None,
                    min_effect: float = stats.DEFAULT_MIN_EFFECT) -> tuple[list, dict]:
    base_name, variants = names[0], names[1:]
    base = {(r["op"], r.get("backend")): r for r in records.latest(home, base_name, op, backend)}
    if not base:
        raise BadInput(f"no stored kernel table for {base_name}" + (f" ({op})" if op else ""),
                       hint=f"measure it: patchbench kernels {base_name} --op {op or 'OP'}")
    items: list = []
    data: dict = {"baseline": base_name, "variants": {}, "min_effect": min_effect}
    refused: list[str] = []
    compared = 0
    for name in variants:
        cands = records.latest(home, name, op, backend)
        shared = [base[(c["op"], c.get("backend"))] for c in cands if (c["op"], c.get("backend")) in base]
        if not shared:
            have = ", ".join("{} ({})".format(c["op"], c.get("backend")) for c in cands) or "nothing stored"
            raise BadInput(f"{name} and {base_name} share no measured (op, backend)", hint=f"{name}: {have}")
        out = []
        for b in shared:
            p = pairing.pair(b, records.of_op(home, name, b["op"], b.get("backend")))
            if p.cand is None:
                refused.append(pairing.not_compared(name, base_name, p))
                items.append(f"[yellow]{escape(refused[-1])}[/]")
                out.append({"op": b["op"], "backend": b.get("backend"), "baseline_record": b.get("id"),
                            "candidate_record": None, "not_compared": p.differs, "rows": []})
                continue
            c = p.cand
            compared += 1
            rows = compare(b, c, min_effect=min_effect)
            title = (f"{name} against {base_name}: {c['op']} ({c.get('backend')}) on {pairing.gpu_key(b)}, "
                     f"speedup = baseline time / candidate time, {c.get('settings', {}).get('trials')} trials each")
            items.append(render_compare(rows, title))
            items.extend(f"[dim]{escape(name)}: {escape(n)}[/]" for n in p.notes)
            wrong = [r for r in rows if r.verdict == WRONG]
            if wrong:
                items.append(f"[bold red]{name}: wrong output at {len(wrong)} shape(s)[/] "
                             f"({', '.join(str(r.dims) for r in wrong[:4])}): not counted as faster")
            out.append({"op": c["op"], "backend": c.get("backend"), "baseline_record": b.get("id"),
                        "candidate_record": c.get("id"), "gpu_key": pairing.gpu_key(b), "notes": p.notes,
                        "rows": [r.to_dict() for r in rows]})
        data["variants"][name] = out
    if not compared:
        raise BadInput("no kernel table of " + ", ".join(variants) + f" can be compared with {base_name}'s: "
                       + " | ".join(refused),
                       hint="time both on one machine with the same --trials/--iters/--warmup/--flush-mb")
    items.append(f"[dim]{stats.verdict_legend(min_effect=min_effect)}; '{WRONG}': the candidate failed its "
                 "correctness check at that shape (whatever its time)[/]")
    return items, data
