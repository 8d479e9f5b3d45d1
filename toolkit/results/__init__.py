"""The results store: what a stored run is, the one writer of it, its exchange format, Slurm jobs.

    records   RunRow / SampleRow, bench_key, gpu_key: what a stored run is
    metrics   the metric registry: name, unit, direction, aliases, headline rank (pure)
    box_flags flags on runs from their GPU state: throttling, foreign processes, ECC, clocks apart
              from the compared runs; box differences between two runs (pure)
    store     SQLite results store (WAL), schema, migrations and queries; the only writer
    exchange  JSON/CSV export, idempotent re-import
    jobs      the Slurm jobs table and the exactly-once import of a finished job's runs

The run stage writes into this package as a run happens (begin, finish, samples), so it sits below
`toolkit.run`: it may import toolkit.recipe and the shared modules, never toolkit.run or later.
"""
