"""The run's GPU state: a sampler for an attempt, and what its record becomes.

`sampler_for(attempt)` samples the GPUs the run sees (CUDA_VISIBLE_DEVICES of the server's env, else
this process's, else all). `attach(attempt, record, kind)` writes the whole series to
`gpu_state.json` beside the run's logs (`log_paths["gpu_state"]`), stores the summary in
`extra["gpu_state"]` and returns the summary metrics as run-level samples (point 0), none without
GPU state. `enforce(attempt)` raises RunInvalid for a flagged run under `--strict-box` /
`[benchmark] strict_box = true`. Effects: a file in the run's directory, store reads.
"""

from __future__ import annotations

import json
import os

from toolkit.run import metrics
from toolkit.run.attempt import Attempt, RunInvalid
from toolkit.run.bench import Sample
from toolkit.run.gpustate import flags
from toolkit.run.gpustate.sampler import Sampler, visible_devices
from toolkit.run.gpustate.summary import summarize

ARTIFACT = "gpu_state.json"


def sampler_for(attempt: Attempt, **kw) -> Sampler:
    """A started sampler over the run's GPUs."""
    environ = {**os.environ, **dict(attempt.prepared.recipe.server.env)}
    return Sampler(devices=visible_devices(environ), **kw).start()


def attach(attempt: Attempt, record: dict, point_kind: str) -> list[Sample]:
    summary = summarize(record)
    attempt.extra["gpu_state"] = summary
    if record.get("available"):
        path = attempt.run_dir / ARTIFACT
        path.write_text(json.dumps(record, separators=(",", ":")))
        attempt.logs["gpu_state"] = path
    return [Sample(name, float(value), metrics.unit_of(name), 0, point_kind)
            for name, value in (summary.get("metrics") or {}).items() if metrics.lookup(name) is not None]


def _peer_clocks(attempt: Attempt) -> list[float]:
    """Median SM clocks of the sweep's earlier ok runs on the same GPU kind (what this run is compared with)."""
    me = attempt.store.get_run(attempt.run_id)
    if not me.group_id:
        return []
    peers = attempt.store.runs(group_id=me.group_id, status="ok", gpu_key=me.gpu_key)
    return [c for r in peers if r.run_id != me.run_id
            for c in [(flags.state_of(r).get("metrics") or {}).get(flags.CLOCK)] if c]


def problems(attempt: Attempt) -> list[str]:
    """The flags of this run against its sweep so far (empty without GPU state)."""
    summary = attempt.extra.get("gpu_state") or {}
    out = flags.own_flags(summary)
    clock = (summary.get("metrics") or {}).get(flags.CLOCK)
    if clock:
        off = flags.clock_outlier(clock, _peer_clocks(attempt))
        if off:
            out.append(off)
    return out


def enforce(attempt: Attempt, samples: list | None = None) -> None:
    """Under strict box mode a flagged run is invalid, with its flags as the reason (and its
    `samples`, kept with it: the numbers stay visible, never counted)."""
    if not getattr(attempt.prepared.recipe.benchmark, "strict_box", False):
        return
    found = problems(attempt)
    if found:
        raise RunInvalid("the box was not quiet (--strict-box): " + "; ".join(found), problems=found,
                         samples=samples, config_verified=True)
