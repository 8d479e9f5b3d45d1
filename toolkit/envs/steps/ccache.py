"""The compiler cache shared by every env and recipe (ccache, else sccache): its launcher, the
environment that makes it path independent, and hit/miss counts."""

from __future__ import annotations

import os
import subprocess
import shutil
from dataclasses import dataclass
from pathlib import Path

from toolkit.envs.steps.steps import version_of


@dataclass(frozen=True)
class CompilerCache:
    kind: str  # "ccache" | "sccache"
    path: Path
    version: str | None

    def launcher(self) -> list[str]:
        return [str(self.path)]

    def environ(self, home: Path, basedir: Path) -> dict[str, str]:
        """Shared cache under home; paths below `basedir` hashed as relative paths."""
        if self.kind == "ccache":
            return {"CCACHE_DIR": str(home / "ccache"), "CCACHE_BASEDIR": str(basedir),
                    "CCACHE_NOHASHDIR": "1"}
        return {"SCCACHE_DIR": str(home / "sccache"), "SCCACHE_BASEDIRS": str(basedir)}

    def stats(self, home: Path) -> dict[str, int] | None:
        """Cumulative hits/misses of the shared cache (ccache only)."""
        if self.kind != "ccache":
            return None
        out = subprocess.run([str(self.path), "--print-stats"], capture_output=True, text=True,
                             env={**os.environ, "CCACHE_DIR": str(home / "ccache")},
                             stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            return None
        vals = {}
        for line in out.stdout.splitlines():
            k, _, v = line.partition("\t")
            if v.strip().isdigit():
                vals[k] = int(v)
        return {"hits": vals.get("direct_cache_hit", 0) + vals.get("preprocessed_cache_hit", 0),
                "misses": vals.get("cache_miss", 0)}


def find_compiler_cache() -> CompilerCache | None:
    for kind in ("ccache", "sccache"):
        found = shutil.which(kind)
        if found:
            return CompilerCache(kind, Path(found), version_of([found, "--version"]))
    return None


def stats_delta(before: dict | None, after: dict | None) -> dict | None:
    if before is None or after is None:
        return None
    return {k: after[k] - before[k] for k in after}
