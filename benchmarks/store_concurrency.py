"""Many writers into one store at once, a reader comparing meanwhile, and compare on a big store.

1. Writers: `--writers` processes (8) each record `--runs` runs (50) with their samples (6 metrics x
   4 points) through `Store.record_run`, all at once, into PostgreSQL and then into SQLite, while
   one reader runs `compare` on the same store in a loop and checks every run it sees is whole (all
   its samples). Reported per engine: stored / lost / duplicated runs, half-written runs seen,
   writes per second (runs and samples), compare latency under load.
2. A store of `--big` runs (10,000; 20 recipes of 500 runs, each with its samples), then compare of
   two of its recipes: latency on both engines (goal: under 1 s).

The runs are the pipeline's own: the fields of a run patchbench's schema-3 release recorded through
its pipeline (tests/data/schema3-demo.sqlite), with new ids, recipes and sweeps; the store's public
writer API writes them (no hand-made SQL).

PostgreSQL: `--pg-url URL`, else a throwaway cluster (tests/postgres_server.py) with fsync and
synchronous commit on, as a real server runs.

    python benchmarks/store_concurrency.py [--writers 8] [--runs 50] [--big 10000] [--pg-url URL]

Measured 2026-12-02 on the shared 2-core box (load 7-9, PostgreSQL 15 throwaway cluster, fsync on):
400/400 runs stored on both, 0 lost, 0 duplicated, 0 half-written seen; writes 61 runs/s (1466
samples/s) PostgreSQL, 33 runs/s (785 samples/s) SQLite; compare under the writers 0.68 s / 0.17 s;
10,000-run store: compare 0.44 s PostgreSQL, 0.45 s SQLite (median of 5).

Exit status 0 when both engines stored every run exactly once, no reader saw half a run, and compare
on the big store took under 1 s on both.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from toolkit.analysis.compare import compare_recipes  # noqa: E402
from toolkit.analysis.selection import Criteria  # noqa: E402
from toolkit.results.store import SampleRow, Store  # noqa: E402

METRICS = {"output_tok_s": "tok/s", "ttft_ms_mean": "ms", "itl_ms_median": "ms", "tpot_ms_mean": "ms",
           "e2e_ms_mean": "ms", "request_s": "req/s"}
POINTS = (1, 2, 4, 8)
N_SAMPLES = len(METRICS) * len(POINTS)
CRITERIA = Criteria(unverified=True, mix_envs=True)


def template() -> dict:
    """The fields of one ok benchmark run the schema-3 release stored through its pipeline."""
    tmp = Path(tempfile.mkdtemp()) / "t.sqlite"
    shutil.copy(ROOT / "tests" / "data" / "schema3-demo.sqlite", tmp)
    run = next(r for r in Store(tmp).runs(recipe="demo/baseline", status="ok"))
    shutil.rmtree(tmp.parent)
    from toolkit.results.store import RUN_FIELDS

    d = {k: v for k, v in run.to_dict().items() if k in RUN_FIELDS}
    for k in ("run_id", "identity", "pid", "pid_started", "started_at", "finished_at"):
        d.pop(k, None)
    return d


def run_fields(tpl: dict, recipe: str, group: str, repeat: int) -> dict:
    return {**tpl, "run_id": str(uuid.uuid4()), "recipe": recipe, "group_id": group, "repeat": repeat,
            "extra": {**tpl.get("extra", {}), "bench": {"writer": group, "i": repeat}}}


def samples_of(seed: int, variant: bool) -> list[SampleRow]:
    gain = 1.1 if variant else 1.0
    return [SampleRow("", m, (100.0 + (seed * 7919 + i) % 13) * gain * p, u, p, "concurrency", 0)
            for i, (m, u) in enumerate(METRICS.items()) for p in POINTS]


def _writer(location: str, tpl: dict, w: int, n: int, go, done) -> None:
    store = Store(location)
    store.recipe_names()  # connected before the start
    go.wait(timeout=300)
    for i in range(n):
        recipe = "bench/var" if i % 2 else "bench/base"
        store.record_run(run_fields(tpl, recipe, f"writer-{w}", i), samples_of(w * 1000 + i, bool(i % 2)))
    done.put(time.time())


def _compare_s(store: Store, recipes: list[str]) -> float:
    t = time.perf_counter()
    compare_recipes(store, recipes, metrics=["output_tok_s"], criteria=CRITERIA)
    return time.perf_counter() - t


def _warm_up() -> None:
    """compare's own imports (scipy and friends), done once before any clock starts."""
    store = Store(Path(tempfile.mkdtemp()) / "warm.sqlite")
    tpl = template()
    for recipe in ("a", "b"):
        for i in range(2):
            store.record_run(run_fields(tpl, recipe, "g", i), samples_of(i, recipe == "b"))
    _compare_s(store, ["a", "b"])
    shutil.rmtree(Path(str(store.path)).parent, ignore_errors=True)


def concurrent(location, tpl: dict, writers: int, runs: int) -> dict:
    """Phase 1 on one engine: see the module doc."""
    ctx = mp.get_context("fork")
    go = ctx.Barrier(writers + 1)  # everyone connected: the clock starts
    done = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(location), tpl, w, runs, go, done)) for w in range(writers)]
    for p in procs:
        p.start()
    reader = Store(location)
    go.wait(timeout=300)
    t0 = time.time()
    latencies, half, looks = [], 0, 0
    while any(p.is_alive() for p in procs):
        rows = reader.runs(recipe=["bench/base", "bench/var"])
        if len({r.recipe for r in rows}) == 2:
            latencies.append(_compare_s(reader, ["bench/base", "bench/var"]))
        per: dict[str, int] = {}
        for s in reader.samples([r.run_id for r in rows]):
            per[s.run_id] = per.get(s.run_id, 0) + 1
        half += sum(1 for r in rows if per.get(r.run_id) != N_SAMPLES)
        looks += 1
    for p in procs:
        p.join()
    ends = [done.get(timeout=10) for p in procs if p.exitcode == 0]
    wall = (max(ends) if ends else time.time()) - t0  # the writers' time: first start to last commit
    stored = reader.runs(recipe=["bench/base", "bench/var"])
    keys = [(r.extra["bench"]["writer"], r.extra["bench"]["i"]) for r in stored]
    want = {(f"writer-{w}", i) for w in range(writers) for i in range(runs)}
    n_samples = len(reader.samples([r.run_id for r in stored]))
    return {"stored": len(set(keys) & want), "lost": len(want - set(keys)), "duplicated": len(keys) - len(set(keys)),
            "samples_ok": n_samples == len(stored) * N_SAMPLES, "half_seen": half, "looks": looks,
            "exit_codes": sorted({p.exitcode for p in procs}), "wall_s": wall, "runs_per_s": len(stored) / wall,
            "samples_per_s": n_samples / wall,
            "compare_ms_median": 1000 * statistics.median(latencies) if latencies else float("nan"),
            "compares": len(latencies)}


def _fill(location: str, tpl: dict, ks: list[int], per: int) -> None:
    store = Store(location)
    for k in ks:
        for i in range(per):
            store.record_run(run_fields(tpl, f"big/r{k:02d}", f"sweep-{i // 2}", i), samples_of(k * per + i, k == 1))


def big_store(location, tpl: dict, n: int, writers: int, recipes: int = 20) -> dict:
    """Phase 2 on one engine: `n` runs over `recipes` recipes (written by `writers` processes, each
    its own recipes), then compare of two of them."""
    store = Store(location)
    store.recipe_names()  # the schema, made once
    t0 = time.perf_counter()
    per = n // recipes
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_fill, args=(str(location), tpl, list(range(w, recipes, writers)), per))
             for w in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    build = time.perf_counter() - t0
    times = [_compare_s(store, ["big/r00", "big/r01"]) for _ in range(5)]
    rows = compare_recipes(store, ["big/r00", "big/r01"], metrics=["output_tok_s"], criteria=CRITERIA)
    return {"runs": len(store.runs(recipe=[f"big/r{k:02d}" for k in range(recipes)])), "build_s": build,
            "compare_s_first": times[0], "compare_s_median": statistics.median(times),
            "compare_rows": len(rows)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--big", type=int, default=10_000)
    ap.add_argument("--pg-url", default=None, help="a PostgreSQL database to use (default: a throwaway cluster)")
    args = ap.parse_args()
    tpl = template()
    _warm_up()
    work = Path(tempfile.mkdtemp(prefix="store-bench-"))
    server = None
    if args.pg_url:
        pg_urls = [args.pg_url, args.pg_url]
    else:
        import postgres_server

        why = postgres_server.unavailable()
        if why:
            print(f"error: {why}", file=sys.stderr)
            return 2
        server = postgres_server.shared_server(Path(tempfile.gettempdir()) / f"patchbench-pg-bench-{uuid.uuid4().hex[:8]}",
                                               durable=True)
        pg_urls = [postgres_server.new_database(server, "bench"), postgres_server.new_database(server, "big")]
    try:
        res = {}
        for engine, loc, big_loc in (("postgresql", pg_urls[0], pg_urls[1]),
                                     ("sqlite", work / "conc.sqlite", work / "big.sqlite")):
            print(f"{engine}: {args.writers} writers x {args.runs} runs ...", flush=True)
            c = concurrent(loc, tpl, args.writers, args.runs)
            print(f"{engine}: a store of {args.big} runs ...", flush=True)
            b = big_store(big_loc, tpl, args.big, args.writers)
            res[engine] = (c, b)
    finally:
        if server is not None:
            import postgres_server

            postgres_server.release(server)
        shutil.rmtree(work, ignore_errors=True)
    want = args.writers * args.runs
    print(f"\n{args.writers} writers x {args.runs} runs ({N_SAMPLES} samples each) at once, a reader comparing meanwhile")
    print(f"{'':24}{'postgresql':>14}{'sqlite':>14}")
    rows = [("stored", "stored", "{}"), ("lost", "lost", "{}"), ("duplicated", "duplicated", "{}"),
            ("half-written seen", "half_seen", "{}"), ("reader looks", "looks", "{}"),
            ("runs/s", "runs_per_s", "{:.1f}"), ("samples/s", "samples_per_s", "{:.0f}"),
            ("compare ms (under load)", "compare_ms_median", "{:.0f}"), ("wall s", "wall_s", "{:.1f}")]
    for label, key, fmt in rows:
        print(f"{label:24}" + "".join(f"{fmt.format(res[e][0][key]):>14}" for e in ("postgresql", "sqlite")))
    print(f"\na store of {args.big} runs (20 recipes x {args.big // 20}, {N_SAMPLES} samples each): compare of two recipes")
    for label, key, fmt in (("runs stored", "runs", "{}"), (f"build s ({args.writers} writers)", "build_s", "{:.1f}"),
                            ("compare s (first)", "compare_s_first", "{:.3f}"),
                            ("compare s (median of 5)", "compare_s_median", "{:.3f}"),
                            ("compare rows", "compare_rows", "{}")):
        print(f"{label:24}" + "".join(f"{fmt.format(res[e][1][key]):>14}" for e in ("postgresql", "sqlite")))
    ok = all(c["stored"] == want and c["lost"] == 0 and c["duplicated"] == 0 and c["half_seen"] == 0
             and c["samples_ok"] and c["exit_codes"] == [0] and b["compare_s_median"] < 1.0
             for c, b in res.values())
    print("\nPASS" if ok else "\nFAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
