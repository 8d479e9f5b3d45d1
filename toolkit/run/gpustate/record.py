"""The run's GPU state: a sampler for an attempt, and what its record becomes.

`sampler_for(attempt, server_pid)` samples the GPUs the run's server uses: its layout (tp x pp, x dp
without DP attention, from base_gpu_id; read from /server_info, else the static check's fields, else
the recipe's flags) within CUDA_VISIBLE_DEVICES of the server's env (else this process's, else all),
with the server's process tree counted as patchbench's own. `attach(attempt, record, kind)` writes the whole series to
`gpu_state.json` beside the run's logs (`log_paths["gpu_state"]`), stores the summary in
`extra["gpu_state"]` and returns the summary metrics as run-level samples (point 0), none without
GPU state. `enforce(attempt)` raises RunInvalid for a flagged run under `--strict-box` /
`[benchmark] strict_box = true`. Effects: a file in the run's directory, store reads.
"""

from __future__ import annotations

import json
import os

from toolkit.results import metrics
from toolkit.run.attempt import Attempt, RunInvalid
from toolkit.run.bench import Sample
from toolkit.results import box_flags as flags
from toolkit.run.gpustate.owners import patchbench_tree
from toolkit.run.gpustate.sampler import Sampler
from toolkit.run.gpustate.scope import layout_positions
from toolkit.run.gpustate.summary import summarize

ARTIFACT = "gpu_state.json"


def server_layout(attempt: Attempt) -> dict:
    """The server's parallel layout args: recipe flags, overridden by the static check's parsed
    ServerArgs fields, overridden by what /server_info reported."""
    p = attempt.prepared
    args = dict(p.recipe.server.args)
    args.update((p.check.fields if p.check else None) or {})
    args.update({k: v for k, v in (attempt.info or {}).items() if not isinstance(v, (dict, list))})
    return args


def sampler_for(attempt: Attempt, server_pid: int | None = None, **kw) -> Sampler:
    """A started sampler over the run's GPUs."""
    environ = {**os.environ, **dict(attempt.prepared.recipe.server.env)}
    return Sampler(environ=environ, positions=layout_positions(server_layout(attempt)),
                   own_tree=lambda: patchbench_tree(server_pid), **kw).start()


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
