"""The report's kernel-table section: for every (op, backend) the baseline measured with
`patchbench kernels`, one row per shape (time, TFLOPS, efficiency against the roofline floor, the
correctness check), the variants' per-shape speedups with their 95% CI and verdicts ("wrong output"
where a variant failed its check), and the plot of TFLOPS and efficiency against M. A variant whose
records were timed on another GPU key or with other trial settings (toolkit/kernels/pairing.py) has
no columns there, only a line saying what differed.

Effects: writes the plot as PNG into the report's directory; returns the Markdown lines and the
HTML fragment (inline SVG) the report appends. Reads $PATCHBENCH_HOME/kernels only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from toolkit.kernels import pairing, records
from toolkit.kernels.plots import tflops_efficiency_plot
from toolkit.kernels.table import _dims, _f, compare, rows  # one way to print a value and a shape
from toolkit.report.plots import svg, write_png
from toolkit.report.tables import esc, html_table, md_table


@dataclass
class KernelSection:
    markdown: list = field(default_factory=list)
    html: str = ""
    images: list = field(default_factory=list)  # (title, file name)

    def __bool__(self) -> bool:
        return bool(self.markdown)


def _tables(home: Path, names: list[str]) -> list[tuple[str, list[str], list[list[str]], list[dict], list[str]]]:
    base_name, variants = names[0], names[1:]
    out = []
    for base in records.latest(home, base_name):
        cands, notes = [], []
        for n in variants:
            mine = records.of_op(home, n, base["op"], base.get("backend"))
            if not mine:
                continue
            p = pairing.pair(base, mine)
            if p.cand is None:
                notes.append(pairing.not_compared(n, base_name, p))
                continue
            cands.append((n, p.cand))
            notes.extend(f"{n}: {x}" for x in p.notes)
        head = ["shape", "dims", f"{base_name} us", "TFLOPS", "efficiency", "check"]
        for n, _ in cands:
            head += [f"{n} us", "speedup [95% CI]", "verdict"]
        per_variant = [{c.base.key(): c for c in compare(base, r)} for _, r in cands]
        body = []
        for r in rows(base):
            row = [r.label, _dims(r.dims), _f(r.median_ms * 1e3, ".1f"), _f(r.tflops, ".3g"),
                   (_f(r.efficiency * 100, ".3g") + "%") if r.efficiency is not None else "-",
                   r.verdict]
            for cmp in per_variant:
                c = cmp.get(r.key())
                if c is None:
                    row += ["-", "-", "not measured"]
                    continue
                lo, hi = c.speedup_ci
                row += [_f(c.cand.median_ms * 1e3, ".1f"),
                        f"{_f(c.speedup, '.3f')} [{_f(lo, '.3f')}, {_f(hi, '.3f')}]", c.verdict]
            body.append(row)
        from toolkit.kernels.server_runner import not_the_servers

        notes.extend(f"{r['recipe']}: {x}" for r in [base] + [c for _, c in cands] if (x := not_the_servers(r)))
        title = f"{base['op']} ({base.get('backend')}) on {(base.get('probe') or {}).get('gpu') or (base.get('probe') or {}).get('device')}"
        out.append((title, head, body, [base] + [r for _, r in cands], notes))
    return out


def kernel_section(home: Path, names: list[str], out_dir: Path) -> KernelSection:
    sec = KernelSection()
    tables = _tables(home, names)
    if not tables:
        return sec
    sec.markdown = ["", "### Kernel tables", "",
                    "Per shape, inside each recipe's env (`patchbench kernels`): median of the trial medians, "
                    "cold L2; efficiency = roofline floor (max(bytes / bandwidth, FLOPs / peak)) / measured; "
                    "check = the output against an fp32 reference from the same quantized inputs. A variant "
                    "that fails the check at a shape is \"wrong output\" there, never faster."]
    parts = ["<h2>Kernel tables</h2>"]
    for i, (title, head, body, recs, notes) in enumerate(tables):
        sec.markdown += ["", f"**{title}**", "", *md_table(head, body), *(x for n in notes for x in ("", n))]
        fig = tflops_efficiency_plot(recs, title)
        name = f"kernels_{i}.png"
        write_png(fig, out_dir / name)
        sec.images.append((f"{title}: TFLOPS and efficiency against M", name))
        sec.markdown += ["", f"![{title}: TFLOPS and efficiency against M]({name})"]
        parts.append(f"<h3>{esc(title)}</h3>" + html_table(head, body) + "".join(f"<p>{esc(n)}</p>" for n in notes))
        parts.append(f'<div class="plots">{svg(fig, title)}</div>')
    sec.html = "\n".join(parts)
    return sec
