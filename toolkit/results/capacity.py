"""What the server could hold, as it reported after start (pure): its KV capacity and running-request limit.

sglang 0.5.23 sizes the KV pool at start from the GPU memory free at that moment (the least over the
ranks; mem_cache/kv_cache_configurator.py) and derives the running-request limit from it, so two
launches of one recipe on a box whose free memory differed are not the same configuration: one can
hold more sequences, and evicts or queues at another load. Neither is a launch argument; both are in
/server_info's `internal_states` (one per DP rank: `memory_usage.token_capacity`,
`effective_max_running_requests_per_dp`), which every run stores.

`lines` says, beside `compare`'s and the report's other server lines:
  - a recipe whose launches reported different KV capacities or limits (pin them with
    `max-total-tokens` / `max-running-requests` in `[server.args]`);
  - a measured concurrency above what the server runs at once (limit per DP rank x DP ranks): the rest
    of the requests queue, and the point measures a batch of the limit, not of the concurrency.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable


def of(run) -> dict:
    """{"token_capacity", "max_running_requests" (all DP ranks)} from a run's stored /server_info;
    a value the server did not report is None."""
    info = getattr(run, "server_info", None) or {}
    states = [s for s in (info.get("internal_states") or []) if isinstance(s, dict)]
    first = states[0] if states else {}
    capacity = (first.get("memory_usage") or {}).get("token_capacity") if isinstance(first.get("memory_usage"), dict) \
        else None
    per_dp = [s.get("effective_max_running_requests_per_dp") for s in states]
    limit = sum(per_dp) if per_dp and all(isinstance(v, int) and v > 0 for v in per_dp) else None
    return {"token_capacity": capacity if isinstance(capacity, int) else info.get("max_total_num_tokens"),
            "max_running_requests": limit}


def lines(runs: Iterable, label: dict | None = None) -> list[str]:
    """The capacity lines of the runs used (grouped by `label[run_id]`, else by recipe)."""
    label = label or {}
    groups: dict[str, list] = defaultdict(list)
    for r in runs:
        groups[label.get(r.run_id, r.recipe)].append(r)
    out = []
    for name, rs in groups.items():
        caps = [of(r) for r in rs]
        for key, what, pin in (("token_capacity", "KV capacities", "max-total-tokens"),
                               ("max_running_requests", "running-request limits", "max-running-requests")):
            seen = sorted({c[key] for c in caps if c[key] is not None})
            if len(seen) > 1:
                out.append(f"{name}: its {len(rs)} launches reported different {what} ({', '.join(f'{v:,}' for v in seen)}): "
                           f"sglang sizes them from the memory free at start, so the launches were not one "
                           f"configuration (pin `{pin}` in [server.args])")
        limits = [c["max_running_requests"] for c in caps if c["max_running_requests"] is not None]
        points = sorted({int(p) for r in rs for p in ((getattr(r, "bench_params", None) or {}).get("points") or [])})
        if limits and (getattr(rs[0], "bench_driver", None) or "serving") == "serving":
            over = [p for p in points if p > min(limits)]
            if over:
                out.append(f"{name}: concurrency {', '.join(map(str, over))} above the {min(limits):,} requests the "
                           "server runs at once: the rest queue, so those points measure a batch of "
                           f"{min(limits):,}, not of the concurrency")
    return out
