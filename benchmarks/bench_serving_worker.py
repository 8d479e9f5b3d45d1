"""sglang's own serving benchmark kept warm between rounds (run with the recipe env's python).

`client_fidelity.py --real` alternates patchbench's client and sglang's `bench_serving` on one
server. Started as `python -m sglang.bench_serving` per round, each of sglang's rounds came after
~10 s of importing sglang, and a shared box's state changed in that gap, so adjacent rounds were
not comparable. This worker parses bench_serving's own command line once (sglang's `cli_main`, so
its defaults and validation are sglang's) and then runs sglang's `run_benchmark` once per line read
from stdin: `SEED OUTPUT_FILE` -> one benchmark with that seed, its JSON line appended to
OUTPUT_FILE, then `done` on stdout. Everything bench_serving prints goes to stderr (the caller's log).

    python benchmarks/bench_serving_worker.py --backend sglang --host H --port P ... < commands
"""

from __future__ import annotations

import contextlib
import copy
import sys


def main() -> int:
    try:
        from sglang.benchmark import serving as bench  # sglang >= 0.5.2x
    except ImportError:
        import sglang.bench_serving as bench
    parsed: list = []
    run_benchmark = bench.run_benchmark
    bench.run_benchmark = parsed.append  # cli_main parses and validates, then hands its args over
    sys.argv = ["bench_serving", *sys.argv[1:]]
    with contextlib.redirect_stdout(sys.stderr):
        bench.cli_main()
    bench.run_benchmark = run_benchmark
    if len(parsed) != 1:
        print(f"error: sglang's cli_main did not reach run_benchmark ({len(parsed)} calls)", flush=True)
        return 2
    for line in sys.stdin:
        if not line.strip():
            continue
        seed, output_file = line.split(maxsplit=1)
        args = copy.deepcopy(parsed[0])
        args.seed, args.output_file = int(seed), output_file.strip()
        with contextlib.redirect_stdout(sys.stderr):
            run_benchmark(args)
        print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
