"""A tool's own env: one pinned requirement in a uv venv under PATCHBENCH_HOME, for tools whose
dependencies must never enter patchbench's process or a recipe's env (Apache Otava, sgl-eval).

Effects: creates `<home>/tools/<name>` once (or where `$<override>` points), with this machine's
pip sources (`toolkit.envs.pip_sources`), under a FileLock beside it; the install log sits beside it
too. The env counts only once its ready marker (the requirement) is written last, so a half-built
env (a failure, a killed build) is cleared and built again on the next use.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

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
        root.parent.mkdir(parents=True, exist_ok=True)
        done = root / READY
        with FileLock(str(root) + ".lock"):
            if done.is_file() and done.read_text().strip() == self.requirement and python.exists():
                return python
            if console is not None:
                console.print(f"creating {self.title}'s own env ({self.requirement}) in {root} (once)")
            uv = uv_bin()
            log = root.parent / f"{root.name}.install.log"
            steps = [[uv, "venv", "-q", "--no-config", "--clear", "--python", sys.executable, str(root)],
                     [uv, "pip", "install", "-q", "--no-config", "--python", str(python),
                      *pip_sources().uv_install_args(), self.requirement]]
            with log.open("w") as fh:
                for argv in steps:
                    fh.write(f"$ {' '.join(argv)}\n")
                    fh.flush()
                    if subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, text=True).returncode != 0:
                        raise PatchbenchError(f"could not create {self.title}'s env ({self.requirement}) in {root}",
                                              log=log)
            done.write_text(self.requirement + "\n")
        return python
