"""Disk of 4 envs that share their heavy dependency vs one env (goal <= 1.3x).

Real disk usage, every inode counted once (hardlinks into uv's cache and between envs are not
counted twice), for two ways of sharing torch 2.13.0 (CPU, ~1 GB installed):

- full mode: 4 envs, each resolving `torch==2.13.0+cpu` + a different patched tree: uv hardlinks
  torch's files from its cache into every env;
- overlay mode: 4 envs over one base venv holding torch: the envs hold only the patched package.

    python benchmarks/env_sharing.py [--n 4]
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402

from toolkit import envs  # noqa: E402
from toolkit.tree.gitrepo import out as git  # noqa: E402  (fixed identity: reproducible SHAs)
from toolkit.envs import BuildSpec, disk_usage, ensure_env, pip_sources  # noqa: E402
from toolkit.tree.applied import AppliedTree  # noqa: E402

TORCH = "torch==2.13.0+cpu"


def tree(root: Path, i: int) -> AppliedTree:
    if not root.exists():
        root.mkdir(parents=True)
        git(root, "init", "-q")
        (root / "benchpkg").mkdir()
        (root / "pyproject.toml").write_text(
            '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
            '[project]\nname = "benchpkg"\nversion = "0.1.0"\n[tool.setuptools]\npackages = ["benchpkg"]\n')
    (root / "benchpkg" / "__init__.py").write_text(f"PATCH = {i}\n")  # one patch per env
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"patch {i}")
    return AppliedTree.at_head("bench", root)


def gib(n: int) -> str:
    return f"{n / 2**30:.3f} GiB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4, help="envs that share")
    args = ap.parse_args()
    quiet = Console(file=io.StringIO())
    ok = True
    with tempfile.TemporaryDirectory(prefix="pb-bench-share-") as tmp:
        tmp = Path(tmp)
        home = tmp / "home"
        src = tmp / "upstream"

        full = [ensure_env([tree(src, i)], BuildSpec(packages=(TORCH,)), home, console=quiet)
                for i in range(args.n)]
        one = disk_usage([full[0].path])
        all_n = disk_usage([e.path for e in full])
        print(f"full mode ({TORCH} hardlinked from uv's cache {envs.uv_cache_dir(home)}):")
        print(f"  1 env: {gib(one)}   {args.n} envs: {gib(all_n)}   ratio {all_n / one:.3f}x "
              "(goal <= 1.3x)")
        ok &= all_n / one <= 1.3

        base = tmp / "base"
        uv = envs.uv_bin()
        subprocess.run([uv, "venv", "-q", "--no-config", "--python", sys.executable, str(base)],
                       check=True)
        subprocess.run([uv, "pip", "install", "-q", "--no-config", "--link-mode", "hardlink",
                        "--python", str(base / "bin" / "python"), *pip_sources().uv_install_args(),
                        TORCH], check=True)
        spec = BuildSpec(mode="overlay", base_python=str(base / "bin" / "python"))
        over = [ensure_env([tree(src, 100 + i)], spec, home, console=quiet) for i in range(args.n)]
        one = disk_usage([base, over[0].path])
        all_n = disk_usage([base, *[e.path for e in over]])
        envs_only = disk_usage([e.path for e in over]) / args.n
        print(f"overlay mode (one base venv with {TORCH}):")
        print(f"  base + 1 env: {gib(one)}   base + {args.n} envs: {gib(all_n)}   ratio "
              f"{all_n / one:.3f}x (goal <= 1.3x); each overlay env: {envs_only / 2**20:.1f} MiB")
        ok &= all_n / one <= 1.3
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
