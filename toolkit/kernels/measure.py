"""Run the kernel probe (`toolkit/probes/kernel_bench.py`) with an env's own interpreter.

Effects: writes the job as JSON into a temporary directory, runs the env's python on it (argv list,
the given environment: the env's run environment plus the recipe's `[server.env]`, so FlashInfer sees
what the server would), logs its output to `log` when given, and returns the parsed JSON result.
`server` is how the server configures the op (toolkit.kernels.bench.server_kernel_config): the MoE
runner's use_fused_finalize and tune_max_num_tokens; `Settings.autotune` (on by default, as sglang
0.5.23 autotunes FlashInfer; `patchbench kernels` follows the recipe's release, toolkit.kernels.server_tuning) and `Settings.cuda_graph` (the timed call replayed from a CUDA graph,
the wrapper's dispatch untimed) say how the probe times it.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from toolkit.errors import PatchbenchError
from toolkit.kernels.registry import OpSpec
from toolkit.kernels.shapes import Shape
from toolkit.resources import PROBES_DIR

PROBE = PROBES_DIR / "kernel_bench.py"


@dataclass(frozen=True)
class Settings:
    warmup: int = 10
    iters: int = 50
    trials: int = 5  # Mann-Whitney needs 4 vs 4 to say p < 0.05: one trial is one observation
    flush_mb: float | None = None  # None: twice the GPU's L2 (64 MiB on CPU)
    seed: int = 0
    device: str | None = None  # None: the op's own
    autotune: bool = True  # FlashInfer's autotuner over the first warmup call, as sglang 0.5.23 does
    cuda_graph: bool = True  # time replays of one captured call (no Python dispatch in the timed region)

    def to_dict(self) -> dict:
        return {"warmup": self.warmup, "iters": self.iters, "trials": self.trials, "flush_mb": self.flush_mb,
                "seed": self.seed, "device": self.device, "autotune": self.autotune, "cuda_graph": self.cuda_graph}


def _run(python: str | Path, job: dict, environ: Mapping[str, str] | None, timeout: float,
         log: Path | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="pb-kernels-") as tmp:
        path = Path(tmp) / "job.json"
        path.write_text(json.dumps(job))
        try:
            out = subprocess.run([str(python), "-I", str(PROBE), str(path)], capture_output=True, text=True,
                                 env=dict(environ) if environ is not None else None, timeout=timeout, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise PatchbenchError(f"kernel probe for {job['op']} ran past {timeout:.0f} s", log=log) from None
        except OSError as exc:
            raise PatchbenchError(f"cannot run the env's interpreter {python}: {exc}") from None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as fh:
            fh.write(f"$ {python} -I {PROBE} <job {json.dumps(job)[:400]}>\n{out.stdout}\n{out.stderr}\n")
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr or out.stdout).strip().splitlines()[-5:]
        raise PatchbenchError(f"kernel probe failed (exit {out.returncode}): {' | '.join(tail)}", log=log)
    return json.loads(lines[-1])


def job_of(op: OpSpec, shapes: list[Shape], *, backend: str | None, settings: Settings,
           server: Mapping | None = None) -> dict:
    """The probe's job (see toolkit/probes/kernel_bench.py)."""
    return {"mode": "run", "op": op.name, "backend": backend, "shapes": [s.dims for s in shapes],
            "rtol": op.rtol, "atol": op.atol, "min_within": op.min_within, "server": dict(server or {}),
            **settings.to_dict()}


def check_op(python: str | Path, op: OpSpec, environ: Mapping[str, str] | None = None, *,
             log: Path | None = None, timeout: float = 600, server: Mapping | None = None) -> dict:
    """Whether the env can import `op`, which backends it offers for the probe's call (and which it
    leaves out, why) and how the call is configured (no kernel runs, no GPU needed).
    Raises PatchbenchError when it cannot."""
    info = _run(python, {"mode": "check", "op": op.name, "server": dict(server or {})}, environ, timeout, log)
    if not info.get("ok"):
        raise PatchbenchError(f"the env cannot run {op.name}: {info.get('error', 'unknown error')}", log=log,
                              hint="check the env's FlashInfer version (`patchbench env show RECIPE`)")
    return info


def measure(python: str | Path, op: OpSpec, shapes: list[Shape], *, backend: str | None,
            settings: Settings = Settings(), environ: Mapping[str, str] | None = None,
            log: Path | None = None, timeout: float = 3600, server: Mapping | None = None) -> dict:
    """Time and check `op` at every shape (one backend); the probe's result with each shape's label."""
    job = job_of(op, shapes, backend=backend, settings=settings, server=server)
    result = _run(python, job, environ, timeout, log)
    if not result.get("ok"):
        raise PatchbenchError(f"{op.name} ({backend}) could not run: {result.get('error')}", log=log)
    for shape, res in zip(shapes, result["results"]):
        res["label"] = shape.label
        res["points"] = list(shape.points)
    return result
