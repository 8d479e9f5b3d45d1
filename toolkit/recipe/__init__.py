"""Stage 1, the recipe: what an experiment declares, read from `recipes/*.toml`.

    spec      the recipe's value types (SourceSpec, BuildSpec, ServerSpec, BenchSpec, TargetSpec,
              EvidenceSpec) (pure)
    schema    the file format as pydantic models; `patchbench schema` (pure)
    values    merged tables -> spec values, patch paths confined to patches/ (pure)
    load      load a recipe: extends, ${VAR} expansion, where each value came from (reads files)
    target    a recipe's [target] -> the facts presented to sglang (toolkit/data/gpus.toml)

May import: toolkit.errors, toolkit.resources, toolkit.roofline (model facts). Nothing of a later stage.
"""
