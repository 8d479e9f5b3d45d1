"""No-op rebuild: the second `ensure_env` of an unchanged recipe must build nothing, in < 2 s.

A miniature upstream (a Python package + two .cu files compiled for 12.0a when nvcc is present)
is built once, then asked for again. Prints the two wall times, their ratio and how many build
steps the second call ran (goal: 0 builds, < 2 s).

    python benchmarks/build_noop.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402

from toolkit import envs  # noqa: E402
from toolkit.tree.gitrepo import out as git  # noqa: E402  (fixed identity: reproducible SHAs)
from toolkit.envs import BuildSpec, ensure_env  # noqa: E402
from toolkit.tree.applied import AppliedTree  # noqa: E402


def make_tree(root: Path) -> AppliedTree:
    root.mkdir(parents=True)
    git(root, "init", "-q")
    (root / "benchpkg").mkdir()
    (root / "benchpkg" / "__init__.py").write_text("VALUE = 1\n")
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "benchpkg"\nversion = "0.1.0"\n[tool.setuptools]\npackages = ["benchpkg"]\n')
    (root / "csrc").mkdir()
    for n in ("a", "b"):
        (root / "csrc" / f"{n}.cu").write_text(f"__global__ void {n}(float* x) {{ x[0] += 1.0f; }}\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    return AppliedTree.at_head("bench", root)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="no-op calls to time")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pb-bench-noop-") as tmp:
        tmp = Path(tmp)
        tree = make_tree(tmp / "upstream")
        cuda = envs.find_nvcc() is not None
        spec = BuildSpec(arch=("12.0a",), cuda=(("bench", ("csrc/*.cu",)),)) if cuda else BuildSpec()
        home = tmp / "home"
        t0 = time.monotonic()
        first = ensure_env([tree], spec, home, recipe="bench", console=Console(file=io.StringIO()))
        t_first = time.monotonic() - t0
        steps_first = len(first.manifest["timings"]) - 1  # minus "total"
        times, builds = [], 0
        for _ in range(args.repeat):
            t0 = time.monotonic()
            again = ensure_env([tree], spec, home, recipe="bench", console=Console(file=io.StringIO()))
            times.append(time.monotonic() - t0)
            builds += 0 if again.reused else 1
        t_noop = statistics.median(times)
    print(f"first build:   {t_first:6.2f} s ({steps_first} steps{', nvcc for 12.0a' if cuda else ''})")
    print(f"no-op rebuild: {t_noop:6.2f} s (median of {args.repeat}; max {max(times):.2f} s)")
    print(f"builds in no-op calls: {builds}")
    print(f"ratio no-op / first: {t_noop / t_first:.3f}x  (goal: 0 builds, < 2 s)")
    ok = builds == 0 and max(times) < 2.0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
