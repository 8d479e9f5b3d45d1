"""A recipe with no benchmark runs of its own because a sweep found it to be another configuration's
server (toolkit.run.same_server: its one launch stopped at verify, `extra.same_server_as`): `compare`
and `report` say so, naming the run that recorded it, instead of "no ok, verified results".

A server against itself has no verdict (as a recipe compared with itself: toolkit.commands.common.
same_twice), so comparing such a variant with the configuration it is refuses with exit 2, and
comparing it with anything else names the configuration to compare in its place. Only a verify run of
the recipe's current definition counts as that record. Effects: reads the store.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from toolkit.errors import BadInput


def copies(store, names: Sequence[str], current: Mapping[str, dict]) -> dict[str, tuple[str, str]]:
    """name -> (the configuration it is the server of, the run id saying so): the newest ok verify run of
    each name whose definition is the recipe's current one (a name without a current definition: any)."""
    from toolkit.results.identity import components_of, definition_differences

    found = {}
    for name in names:
        for run in store.runs(recipe=name, status="ok", newest_first=True):
            other = (run.extra or {}).get("same_server_as")
            if not other:
                continue
            if name in current and definition_differences(components_of(run), current[name]):
                continue  # the recipe changed since: that launch no longer says what it is
            found[name] = (other, run.run_id)
            break
    return found


def refusal(store, names: Sequence[str], missing: Sequence[str], current: Mapping[str, dict],
            verb: str = "compare") -> BadInput | None:
    """The refusal for `verb` of `names` when one of `missing` (recipes without runs that count) is
    another configuration's server, else None."""
    found = copies(store, missing, current)
    if not found:
        return None
    name = next(n for n in missing if n in found)
    other, run_id = found[name]
    said = f"{name} is the same server as {other} (sglang resolved both to one configuration: run {run_id})"
    rest = [other if n == name else n for n in names]
    if other in names:
        others = list(dict.fromkeys(rest))
        hint = ("a server compared with itself has no verdict; its run-to-run spread is in "
                f"`patchbench report {other}`")
        if len(others) > 1:
            hint += f"; the others against it: `patchbench {verb} {' '.join(others)}`"
        return BadInput(f"{said}: it has no runs of its own, and {other}'s against themselves would read "
                        "\"no difference\" by construction", hint=hint)
    return BadInput(f"{said}: it has no runs of its own; {other}'s numbers stand for it",
                    hint=f"`patchbench {verb} {' '.join(rest)}`")
