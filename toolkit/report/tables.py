"""One way to render a table for every report (the main report, its kernel tables and answers, the
sweep report): a GitHub-flavoured Markdown table (cells with `|` escaped, newlines folded) and an HTML
`<table>` with `<thead>`/`<tbody>` (cells escaped; an optional class per row). Pure functions."""

from __future__ import annotations

import html
from typing import Any, Callable, Sequence


def esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


def md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(head: Sequence[Any], rows: Sequence[Sequence[Any]]) -> list[str]:
    """The table's Markdown lines: header, separator, one line per row."""
    out = ["| " + " | ".join(md_cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    return out


def html_table(head: Sequence[Any], rows: Sequence[Sequence[Any]], attrs: str = "",
               row_class: Callable[[Sequence[Any]], str | None] | None = None) -> str:
    """The table as HTML; `attrs` go into the `<table>` tag (e.g. `class="results"`), `row_class(row)`
    names a class for a row (None: none)."""
    out = [f"<table{' ' + attrs if attrs else ''}><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head)
           + "</tr></thead><tbody>"]
    for row in rows:
        cls = row_class(row) if row_class else None
        tag = f'<tr class="{esc(cls)}">' if cls else "<tr>"
        out.append(tag + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)
