"""Stage 6, analysis over stored results: which runs count, compare, attribute, bisect, efficiency.

    selection   which runs count (the one rule: run identity, measured samples, verified config)
    compare     ratios, CIs and verdicts per point; what else differed
    attribute   what each patch of a stack buys (pure)
    bisect      the first bad patch / release / commit (pure)
    releases    a recipe moved onto another release
    variants    recipe variants measured through the pipeline, reusing runs of the same identity
    efficiency  results against the roofline
    stats       Mann-Whitney U, CIs of ratios, verdicts, the verdict legend (pure)
    sequential  verdicts valid under repeated looks (repeated confidence intervals of the ratio; pure)
    spread_flag a configuration whose launch-to-launch spread is far larger than its peers' (pure)
    campaigns        which launches of a pair were made together (a sweep of both sides); pure
    search_campaign  which stored runs a bisect's looks read: its own campaign's (a resumed one's); pure
    sequential_runs  `run` (the default for several recipes) and `sweep`: launch rounds until every
                pair's verdict is settled
    sequential_steps  attribute's steps measured until settled (through a measure callback; pure)
    launch_cost GPU minutes of launches, and of the fixed design (pure)
    provenance  what else differed between two runs' envs, toolchains and resolved configs (pure)

`attribute` and `bisect` are pure (values and callbacks in, dataclasses out) so that the caller
decides where measurements come from. May import: toolkit.run (the pipeline, the metric registry),
toolkit.results and lower stages; never toolkit.report, executors or commands.
"""
