"""The results store: what a stored run is, the one writer of it, its exchange format, Slurm jobs.

    records   RunRow / SampleRow, bench_key, gpu_key: what a stored run is
    metrics   the metric registry: name, unit, direction, aliases, headline rank (pure)
    box_flags flags on runs from their GPU and host state: throttling, foreign processes, ECC, clocks
              apart from the compared runs, other processes' CPU, steal; box differences (pure)
    tables    the store's tables, defined once (SQLAlchemy Core) for SQLite and PostgreSQL
    engine    where the store is (path, postgresql:// URL, [store] config) and how it is reached
    migrations/  Alembic migrations, run by the store (legacy: the SQL of schemas 1..3; schema.py)
    store     the results store on either engine: transactions, queries; the only writer
    artifacts a run's files kept in a shared directory, their sha256 checked on read; vouch: the
              answers and GPU series a verdict uses, held to their sha256
    exchange  JSON/CSV export, idempotent re-import
    jobs      the Slurm jobs table and the exactly-once import of a finished job's runs

The run stage writes into this package as a run happens (begin, finish, samples), so it sits below
`toolkit.run`: it may import toolkit.recipe and the shared modules, never toolkit.run or later.
"""
