"""Print the first of the module names given on the command line that the env can import from
(found by importlib.util.find_spec, nothing executed); exit 1 and print nothing if none exists.

    python find_module.py sglang.benchmark.one_batch sglang.bench_one_batch
"""

import importlib.util
import sys


def main(names):
    for name in names:
        try:
            if importlib.util.find_spec(name) is not None:
                print(name)
                return 0
        except (ImportError, ValueError):
            continue
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
