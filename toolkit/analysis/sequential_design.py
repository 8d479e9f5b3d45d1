"""The sequential design a recipe's runs are judged with (one place for every command).

A recipe's `[benchmark]` min_effect, max_repeats and pool_stored_spread, each overridden by a
command's flag when one is given: `run`, `sweep`, `attribute`, `track --settle` and `plan` launch
with it. The launching commands record it in each run they launch (`launched_under`: `extra["sequential"]`), and `compare` and
`report` judge such a pair with the recorded design (toolkit.analysis.selection.Selection.launched_under),
so a pair settled by `run --max-repeats 16` reads the same in `compare` (the early looks' boundaries
depend on max_repeats); stored runs launched otherwise are judged with the baseline recipe's (`for_ref`).
"""

from __future__ import annotations

from toolkit.analysis import sequential as seq


def for_bench(bench, *, min_effect: float | None = None, min_repeats: int | None = None,
              max_repeats: int | None = None, pool_stored: bool | None = None) -> seq.Design:
    """The design from a recipe's BenchSpec and the command's overrides (None: the recipe's).
    A bad combination raises BadInput naming the flags."""
    from toolkit.errors import BadInput

    try:
        return seq.Design(min_effect=bench.min_effect if min_effect is None else min_effect,
                          min_repeats=seq.DEFAULT_MIN_REPEATS if min_repeats is None else min_repeats,
                          max_repeats=bench.max_repeats if max_repeats is None else max_repeats,
                          pool_stored=bench.pool_stored_spread if pool_stored is None else pool_stored)
    except ValueError as exc:
        raise BadInput(f"--min-repeats/--max-repeats/--min-effect: {exc}") from None


def unused_settings(reference, others) -> list[str]:
    """One line per other recipe whose own `[benchmark]` min_effect or max_repeats differs from the
    reference's: the pair is judged with the reference's design, so those settings are not used."""
    out = []
    for r in others:
        for key in ("max_repeats", "min_effect"):
            mine, ref = getattr(r.benchmark, key), getattr(reference.benchmark, key)
            if mine != ref:
                out.append(f"{r.name}: `[benchmark] {key} = {mine}` is not used: the verdicts against "
                           f"{reference.name} use its design ({key} = {ref}); set it there or pass the flag")
    return out


def for_ref(ref: str, min_effect: float | None = None) -> seq.Design:
    """The design of a recipe by name (the defaults when it is known only by its stored runs);
    `min_effect`, the command line's, replaces the recipe's."""
    import dataclasses

    from toolkit.errors import PatchbenchError
    from toolkit.recipe.load import load_recipe

    try:
        design = for_bench(load_recipe(ref).benchmark)
    except PatchbenchError:
        design = seq.Design()
    return design if min_effect is None else dataclasses.replace(design, min_effect=min_effect)


def launched_under(prepared, design: seq.Design | None):
    """`prepared` (toolkit.run.pipeline.Prepared) whose runs record the sequential design they are
    launched under (`extra["sequential"]`); unchanged for no design or nothing prepared."""
    import dataclasses

    if design is None or prepared is None:
        return prepared
    return dataclasses.replace(prepared, extra={**prepared.extra, "sequential": design.record()})
