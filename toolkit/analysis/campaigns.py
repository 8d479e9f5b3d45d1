"""Which launches of a pair were launched together, in one campaign (pure).

Interleaving (A B, B A, ...) cancels box drift only between launches made together. A stored run of
one side from another campaign (a reference `run` measured yesterday, a prefix an earlier
`attribute` measured before the box became loaded) compared with new launches of the other side
measures the box's change as much as the patch's: an audit saw a harmless patch called "1.08x slower
[1.01x-1.15x]" that way. So a sequential verdict judges only the launches of each side made in a
campaign the other side was launched in too:

- a campaign is a sweep (`group_id`: one `run`/`sweep`/`attribute` call; a killed `run` resumed
  joins its sweep, so a resume is the same campaign);
- a run counts for the pair when its sweep holds runs of both sides, or is `here` (the sweep of the
  call launching now, whose launches of the other side are still to come);
- every other run of a side is *reused from another campaign*: it is not in the looks (its spread
  may still be pooled as a prior, around its own mean, so a mean shift between campaigns never
  enters), and the launching call launches that side again until both have their launches here.

A verdict read later (`compare`, the report) applies the same rule with `here` unknown (None), so it
reads the launches the call judged. `describe` names the runs left out: how many, which sweep, when,
and how busy the host was then (toolkit.run.hoststate's record), against the counted runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class Split:
    """The run ids of each side that count (launched in a campaign of both), and the others."""

    a: tuple[str, ...]
    b: tuple[str, ...]
    reused_a: tuple[str, ...]
    reused_b: tuple[str, ...]

    @property
    def reused(self) -> bool:
        return bool(self.reused_a or self.reused_b)


def shared_groups(rows_a: Sequence[Any], rows_b: Sequence[Any], here: str | None = None) -> set[str]:
    """The sweeps that hold runs of both sides, and `here` (the sweep launching now)."""
    ga = {r.group_id for r in rows_a if r.group_id}
    gb = {r.group_id for r in rows_b if r.group_id}
    return (ga & gb) | ({here} if here else set())


def split(rows_a: Sequence[Any], rows_b: Sequence[Any], here: str | None = None) -> Split:
    """Each side's runs (rows with run_id and group_id, in sequence order) split into those launched in
    a campaign of both sides (or `here`) and those reused from another campaign, order kept."""
    shared = shared_groups(rows_a, rows_b, here)

    def part(rows, keep: bool) -> tuple[str, ...]:
        return tuple(r.run_id for r in rows if (r.group_id in shared) == keep)

    return Split(part(rows_a, True), part(rows_b, True), part(rows_a, False), part(rows_b, False))


def split_ids(store, ids_a: Sequence[str], ids_b: Sequence[str], here: str | None = None) -> Split:
    """`split` over stored run ids (order kept)."""
    ids = [*ids_a, *ids_b]
    rows = {r.run_id: r for r in store.runs(run_ids=ids)} if ids else {}
    return split([rows[i] for i in ids_a if i in rows], [rows[i] for i in ids_b if i in rows], here)


def _busy(rows: Sequence[Any]) -> str | None:
    """Other processes' CPU use over the runs' windows (mean), as the host record has it."""
    from toolkit.results.box_flags import host_of

    hosts = [host_of(r) for r in rows]
    shares = [h.get("foreign_cores") or 0.0 for h in hosts if h.get("available")]
    if not shares:
        return None
    cpus = max((h.get("cpus") or 0) for h in hosts if h.get("available")) or "?"
    return f"other processes {sum(shares) / len(shares):.1f} of {cpus} CPUs"


def _when(rows: Sequence[Any]) -> str:
    at = sorted(r.started_at or "" for r in rows if r.started_at)
    if not at:
        return "at an unknown time"
    first, last = at[0][:16].replace("T", " "), at[-1][:16].replace("T", " ")
    return first if first == last else f"{first} .. {last}"


def describe(name: str, reused: Sequence[Any], counted: Sequence[Any]) -> str:
    """One line: `name`'s reused runs (rows), where and when they ran and how busy the host was,
    beside the runs the verdict counts."""
    groups = sorted({r.group_id or "-" for r in reused})
    hosts = sorted({(r.machine or {}).get("host") or "?" for r in reused})
    busy, now = _busy(reused), _busy(counted)
    box = f"; {busy} then" + (f", {now} in the counted runs" if now else "") if busy else ""
    return (f"{name}: {len(reused)} stored run(s) from another campaign (sweep {', '.join(groups)}, "
            f"{_when(reused)}, host {', '.join(hosts)}{box}) not judged against launches made since")


def left_out(name_a: str, name_b: str, sp: Split, rows: dict) -> tuple[str, ...]:
    """`describe` of each side's reused runs (`rows`: run id -> row), for the verdict's text."""
    return tuple(describe(name, [rows[r] for r in left], [rows[r] for r in kept])
                 for name, left, kept in ((name_a, sp.reused_a, sp.a), (name_b, sp.reused_b, sp.b)) if left)


def qualifier(left: Sequence[str]) -> str:
    """What a verdict's text adds when runs were left out ("" when none)."""
    return f" (judged on launches made together; left out: {'; '.join(left)})" if left else ""
