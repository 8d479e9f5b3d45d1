"""Which of several module names an env's interpreter can import (sglang renames its entry points
between releases; the env is asked, never its version number): runs probes/find_module.py with the
env's python (importlib.util.find_spec, nothing imported or executed). Used by the one-batch
benchmark driver and the quality gate's evaluation."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Sequence

from toolkit.errors import PatchbenchError
from toolkit.resources import PROBES_DIR

FIND_MODULE = PROBES_DIR / "find_module.py"


def first_module(python: str | Path, names: Sequence[str], environ: dict | None = None) -> str | None:
    """The first of `names` the env of `python` has, else None; PatchbenchError when the
    interpreter cannot be asked."""
    try:
        proc = subprocess.run([str(python), str(FIND_MODULE), *names], capture_output=True, text=True,
                              env=environ, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PatchbenchError(f"cannot ask {python} for {', '.join(names)}: {exc}") from None
    module = proc.stdout.strip()
    return module if proc.returncode == 0 and module in names else None
