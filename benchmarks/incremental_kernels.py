"""Incremental kernels: rebuilding after a patch that touches one .cu file vs compiling that file
alone (goal <= 1.2x).

A tree holds N CUB kernels (each a few seconds of nvcc for 12.0a). The first env compiles all of
them through the shared ccache; a patch then changes one file, which makes a new env (new tree
hash). The benchmark compares the new env's nvcc step (N-1 cache hits, 1 miss) and the whole
env build with a plain `nvcc` of the changed file alone.

    python benchmarks/incremental_kernels.py [--files 6]
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402

from toolkit import envs  # noqa: E402
from toolkit.tree.gitrepo import out as git  # noqa: E402  (fixed identity: reproducible SHAs)
from toolkit.envs.steps import gencode_flags  # noqa: E402
from toolkit.envs import BuildSpec, ensure_env  # noqa: E402
from toolkit.tree.applied import AppliedTree  # noqa: E402

KERNEL = """#include <cub/cub.cuh>
#define FILE_ID {i}
#define SCALE {scale}
template <int BLOCK, typename T>
__global__ void reduce_kernel_{i}(const T* in, T* out, int n) {{
  using BlockReduce = cub::BlockReduce<T, BLOCK>;
  using BlockScan = cub::BlockScan<T, BLOCK>;
  __shared__ union {{ typename BlockReduce::TempStorage r; typename BlockScan::TempStorage s; }} tmp;
  T v = threadIdx.x < n ? in[blockIdx.x * BLOCK + threadIdx.x] * T(SCALE) : T(FILE_ID);
  T p;
  BlockScan(tmp.s).InclusiveSum(v, p);
  __syncthreads();
  T s = BlockReduce(tmp.r).Sum(p);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}}
#define INST(B, T) template __global__ void reduce_kernel_{i}<B, T>(const T*, T*, int);
INST(64, float) INST(128, float) INST(256, float)
INST(64, int) INST(128, int) INST(256, int)
"""


def tree_at(root: Path) -> AppliedTree:
    return AppliedTree.at_head("kern", root)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=6, help=".cu files in the tree")
    args = ap.parse_args()
    nvcc = envs.find_nvcc()
    if nvcc is None:
        print("SKIP: no nvcc")
        return 0
    if shutil.which("ccache") is None:
        print("note: no ccache: every rebuild compiles everything")
    quiet = Console(file=io.StringIO())
    with tempfile.TemporaryDirectory(prefix="pb-bench-inc-") as tmp:
        tmp = Path(tmp)
        up = tmp / "upstream"
        (up / "kpkg").mkdir(parents=True)
        (up / "csrc").mkdir()
        git(up, "init", "-q")
        (up / "kpkg" / "__init__.py").write_text("")
        (up / "pyproject.toml").write_text(
            '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
            '[project]\nname = "kpkg"\nversion = "0.1.0"\n[tool.setuptools]\npackages = ["kpkg"]\n')
        for i in range(args.files):
            (up / "csrc" / f"k{i}.cu").write_text(KERNEL.format(i=i, scale=1))
        git(up, "add", "-A")
        git(up, "commit", "-q", "-m", "base")
        spec = BuildSpec(arch=("12.0a",), cuda=(("kern", ("csrc/*.cu",)),))
        home = tmp / "home"

        t0 = time.monotonic()
        env1 = ensure_env([tree_at(up)], spec, home, console=quiet)
        t_first = time.monotonic() - t0

        # the patch: one .cu file changes
        patched = up / "csrc" / "k0.cu"
        patched.write_text(KERNEL.format(i=0, scale=2))
        git(up, "commit", "-q", "-am", "patch k0.cu")
        t0 = time.monotonic()
        env2 = ensure_env([tree_at(up)], spec, home, console=quiet)
        t_env2 = time.monotonic() - t0
        t_step = env2.manifest["timings"]["cuda-kern"]
        stats = env2.manifest["cuda"]["ccache"]

        # the same file alone, plain nvcc, same flags
        alone = tmp / "alone"
        alone.mkdir()
        shutil.copy(patched, alone / "k0.cu")
        t0 = time.monotonic()
        subprocess.run([str(nvcc), *gencode_flags(spec.arch), "-c", "k0.cu", "-o", "k0.o"],
                       cwd=alone, check=True)
        t_alone = time.monotonic() - t0
        assert env1.key != env2.key
    print(f"first env ({args.files} .cu files, cold cache): {t_first:6.2f} s")
    print(f"nvcc of the patched file alone:            {t_alone:6.2f} s")
    print(f"rebuild after the patch, nvcc step:        {t_step:6.2f} s  (ccache: {stats})")
    print(f"rebuild after the patch, whole new env:    {t_env2:6.2f} s")
    print(f"ratio nvcc step / file alone: {t_step / t_alone:.3f}x  (goal <= 1.2x)")
    print(f"ratio whole env / file alone: {t_env2 / t_alone:.3f}x")
    ok = t_step / t_alone <= 1.2
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
