"""Which stored runs a bisect's looks read: those of its own campaign (pure).

A bisect (`patchbench bisect`, `history --bisect`) reads one sequence of values per probe and compares
each with its reference (the base, or the nearest good probe); interleaving cancels the box's drift
only between launches made together (toolkit.analysis.campaigns). A probe's stored runs from another
campaign (a `run` of the base yesterday, the points an earlier `track` measured, another bisect) read
against launches made today measure the box's change as much as the patch's: a box 8% slower since
called a harmless first patch "the culprit, 1.08x slower". So a search reads only the runs of its own
campaign:

- the sweep of this call (`group_id`), or the sweep of an earlier call of the same search (the same
  `key`: what was asked, recorded in each probe run's `extra["search"]`) that this call continues (a
  killed bisect resumed, or one asked again: it reads the values it read, in the same order);
- every other stored run of a probe is *reused from another campaign*: not a value of the looks (a
  bisect has no noise prior), and the probe launches again here; the result names what was left out
  (`campaigns.describe`).

Only an unfinished sweep is continued with launches (a killed call). A search that finished writes
`DONE` (when) into its sweep's runs; asked again, its sweep is *replayed*: the same values in the same
order, nothing launched (it says so, and `--fresh` measures again in a new campaign). A finished sweep
never takes new launches: one that cannot answer without a launch (a probe's configuration changed since,
a run was deleted) is no answer (`NotReplayable`), and the search measures again in a new campaign:
new launches of one probe read against another probe's launches of weeks ago would judge the box's
change as much as the patch's (a harmless patch edited after a finished bisect, the box 15% slower
since: "culprit, 1.13x slower").
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

TAG = "search"  # the run's extra field that names the search it was launched by
DONE = "search_finished"  # the run's extra field: when the search that launched it finished (its sweep is done)


class NotReplayable(Exception):
    """A finished search's sweep holds no value a look needs: it is measured again in a new campaign."""


def key(*parts: Any) -> str:
    """A search's key: what was asked (the command and its deciding options), as one string."""
    return " ".join(str(p) for p in parts if p not in (None, ""))


def resumed(rows: Iterable[Any], search: str) -> str | None:
    """The newest sweep whose runs (rows with group_id, started_at, extra) were launched by the same
    search: the campaign a new call of it continues; None when none was."""
    newest: dict[str, str] = {}
    for r in rows:
        if r.group_id and (r.extra or {}).get(TAG) == search:
            newest[r.group_id] = max(newest.get(r.group_id, ""), r.started_at or "")
    return max(newest, key=lambda g: newest[g]) if newest else None


def split(rows: Sequence[Any], group_id: str) -> tuple[list[str], list[str]]:
    """(run ids of this campaign's sweep, run ids reused from another campaign), order kept."""
    mine = [r.run_id for r in rows if group_id and r.group_id == group_id]
    return mine, [r.run_id for r in rows if not (group_id and r.group_id == group_id)]


def finished(rows: Iterable[Any], group_id: str, search: str | None = None) -> str | None:
    """When the search whose sweep is `group_id` finished (the latest `DONE` among its runs; with `search`,
    among the runs that search launched: `history --bisect` bisects each change point of one call in one
    sweep, and one finished must not close another's); None: it did not (a killed call: it may be continued)."""
    at = [str((r.extra or {}).get(DONE)) for r in rows if r.group_id == group_id and (r.extra or {}).get(DONE)
          and (search is None or (r.extra or {}).get(TAG) == search)]
    return max(at) if at else None
