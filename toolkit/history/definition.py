"""Which tracked runs are of the recipe as its file says now (pure but `current`, which reads the
model's config.json).

A tracked series moves through upstream points, so each point has its own env key; what must stay the
same along it is everything else of the run identity (toolkit/results/identity.py): the server
arguments and [server.env], the model and its config, the [target] and the [benchmark]. A tracked run
of another definition (the recipe was edited since) does not count in the series: `track` measures
its point again and `history` leaves it out and says so. The GPU key is held the same by the series
itself (toolkit/history/series.py).
"""

from __future__ import annotations

from toolkit.recipe.load import Recipe
from toolkit.results.identity import DEFINITION_FIELDS, components_of, differences
from toolkit.results.records import RunRow, comparable_bench_params

FIELDS = (*DEFINITION_FIELDS, "model_config")


def current(recipe: Recipe) -> dict:
    """The recipe's definition now, with its model's config hash (the fields of `FIELDS`)."""
    from toolkit.run.identity import model_config_sha256, recipe_definition

    return {**recipe_definition(recipe), "model_config": model_config_sha256(recipe.server.model)}


def changes(run: RunRow, now: dict) -> list[str]:
    """What the recipe changed since `run` was measured ([] when it is of the recipe as it is now),
    one phrase each ("server arg mini-step-base-ms: (unset) -> 16")."""
    pa, pb = comparable_bench_params(None, run.bench_params), comparable_bench_params(None, now.get("bench_params"))
    bench = ", ".join(f"{k} {pa.get(k, '(unset)')} -> {pb.get(k, '(unset)')}"
                      for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k))
    return differences(components_of(run), now, FIELDS, bench or None)
