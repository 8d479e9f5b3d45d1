"""A tool's own env: one pinned requirement in a uv venv under PATCHBENCH_HOME, for tools whose
dependencies must never enter patchbench's process or a recipe's env (Apache Otava, sgl-eval).

Effects: creates `<home>/tools/<name>` once (or where `$<override>` points), with this machine's
pip sources (`toolkit.envs.pip_sources`), built once for concurrent callers (`toolkit.build_once`:
a lock beside it, a relocatable venv made in a temporary directory and published by one rename);
the install log sits beside it. The env counts only with its ready marker (the requirement), so a
half-built env (a failure, a killed build) is never used.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from toolkit.build_once import build_once
from toolkit.errors import PatchbenchError

READY = ".patchbench-ready"


@dataclass(frozen=True)
class ToolEnv:
    title: str  # what messages call the tool, e.g. "Apache Otava"
    requirement: str  # pinned, e.g. "apache-otava==0.8.0"
    name: str  # its directory under <home>/tools, named by the pinned version
    override: str  # the variable that places it elsewhere (tests share one between homes)

    def root(self, home: Path) -> Path:
        where = os.environ.get(self.override)
        return Path(where).expanduser() if where else Path(home) / "tools" / self.name

    def ensure(self, home: Path, console=None) -> Path:
        """The env's interpreter, created on first use; PatchbenchError (with the log) when the
        install fails."""
        from toolkit.envs import pip_sources, uv_bin

        root = self.root(home)
        python = root / "bin" / "python"
        log = root.parent / f"{root.name}.install.log"

        def build(tmp: Path) -> None:
            if console is not None:
                console.print(f"creating {self.title}'s own env ({self.requirement}) in {root} (once)")
            uv = uv_bin()
            steps = [[uv, "venv", "-q", "--no-config", "--relocatable", "--python", sys.executable, str(tmp)],
                     [uv, "pip", "install", "-q", "--no-config", "--python", str(tmp / "bin" / "python"),
                      *pip_sources().uv_install_args(), self.requirement]]
            with log.open("w") as fh:
                for argv in steps:
                    fh.write(f"$ {' '.join(argv)}\n")
                    fh.flush()
                    if subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, text=True).returncode != 0:
                        raise PatchbenchError(f"could not create {self.title}'s env ({self.requirement}) in {root}",
                                              log=log)
            (tmp / READY).write_text(self.requirement + "\n")

        def complete(d: Path) -> bool:
            done = d / READY
            return done.is_file() and done.read_text().strip() == self.requirement and (d / "bin" / "python").exists()

        build_once(root, build, complete=complete)
        return python
