"""`patchbench compare BASE CAND ... --kernels-table`: the stored kernel tables of each variant against
the baseline's, per shape, for every (op, backend) both measured (newest record of each; reads
$PATCHBENCH_HOME/kernels only). Returns what to print and the JSON form."""

from __future__ import annotations

from pathlib import Path

from toolkit.analysis import stats
from toolkit.errors import BadInput
from toolkit.kernels import records
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
    for name in variants:
        cands = records.latest(home, name, op, backend)
        pairs = [(base[(c["op"], c.get("backend"))], c) for c in cands if (c["op"], c.get("backend")) in base]
        if not pairs:
            have = ", ".join("{} ({})".format(c["op"], c.get("backend")) for c in cands) or "nothing stored"
            raise BadInput(f"{name} and {base_name} share no measured (op, backend)", hint=f"{name}: {have}")
        out = []
        for b, c in pairs:
            rows = compare(b, c, min_effect=min_effect)
            title = (f"{name} against {base_name}: {c['op']} ({c.get('backend')}), speedup = baseline time / "
                     f"candidate time, {c.get('settings', {}).get('trials')} trials each")
            items.append(render_compare(rows, title))
            wrong = [r for r in rows if r.verdict == WRONG]
            if wrong:
                items.append(f"[bold red]{name}: wrong output at {len(wrong)} shape(s)[/] "
                             f"({', '.join(str(r.dims) for r in wrong[:4])}): not counted as faster")
            out.append({"op": c["op"], "backend": c.get("backend"), "baseline_record": b.get("id"),
                        "candidate_record": c.get("id"), "rows": [r.to_dict() for r in rows]})
        data["variants"][name] = out
    items.append(f"[dim]{stats.verdict_legend(min_effect=min_effect)}; '{WRONG}': the candidate failed its "
                 "correctness check at that shape (whatever its time)[/]")
    return items, data
