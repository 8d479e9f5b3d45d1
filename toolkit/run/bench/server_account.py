"""The server's own account of a measured window: sglang's `/metrics` read before and after it.

A server launched with `--enable-metrics` counts, in its own processes, the requests it finished, their
prompt, cached and generated tokens, the inter-token latency of every token (tokenizer manager's
clock), aborted and retracted requests, and every decode forward pass by whether it replayed a CUDA
graph. The serving client reads `/metrics` after a point's warm-up and again once the point's measured
requests are all counted (the counters move when a request finishes, a moment after its last chunk
reached the client), and the difference is the account of exactly that window
(`difference`). What it says beside the client's numbers (`findings`):

  problems (the point's errors: the run is stored invalid, its numbers are not the client's requests alone)
    the server finished more requests than the client sent: someone else used this server meanwhile;
    or generated another number of tokens than the client counted.
  notes (numbers kept, the reason said)
    requests retracted (the KV cache was short: their tokens were computed twice);
    decode passes that ran eager on a CUDA server (concurrency above --cuda-graph-max-bs, or graphs
    off): the step the client timed is not the graph-replayed step;
    prompt tokens served from the prefix cache (their prefill was not computed).
  a metric (stored with the point's samples)
    spec_tokens_per_verify: under speculative decoding, generated tokens per verify pass of the
    window's requests (`tokens_per_verify`), so `compare` shows a variant's acceptance beside its speed.

Without `--enable-metrics` the server has no `/metrics` (HTTP 404): no account, said once. Pure but
for `read`; Prometheus text is parsed by prometheus-client's parser.
"""

from __future__ import annotations

import math
from typing import Optional

ITL = "sglang:inter_token_latency_seconds"
# counter families read (Prometheus drops "_total" from a counter family's name; its samples keep it)
COUNTERS = {
    "sglang:num_requests": "requests",
    "sglang:prompt_tokens": "prompt_tokens",
    "sglang:generation_tokens": "generation_tokens",
    "sglang:cached_tokens": "cached_tokens",
    "sglang:num_aborted_requests": "aborted_requests",
    "sglang:num_retracted_requests": "retracted_requests",
    # speculative decoding: each finished request adds its verify passes (tokenizer manager's
    # observe_one_finished_request, sglang 0.5.23); absent from /metrics until a request speculated
    "sglang:spec_verify_calls": "spec_verify_calls",
}
PASSES = "sglang:cuda_graph_passes"  # label mode: decode_cuda_graph | decode_none | prefill_*
MODES = {"decode_cuda_graph": "decode_graph_passes", "decode_none": "decode_eager_passes"}
# Counted by every scheduler process of sglang 0.5.23, each under its own tp_rank/pp_rank (and dp_rank under
# attention DP) label (metrics_collector.py's scheduler labels): all TP ranks of one DP rank count the same
# batches, so a sum over label sets would count a TP8 server's retractions and decode passes 8 times. They are
# read once per DP rank (its lowest TP/PP rank's series) and summed over DP ranks. Under pipeline parallelism
# every stage's scheduler (event_loop_pp) processes every microbatch's result and counts it too, under its
# pp_rank, so the same one series stands for the stage set. The tokenizer manager's counters (requests,
# tokens, ITL) carry no rank label: counted once per request.
SCHEDULER_SIDE = {"retracted_requests", "decode_graph_passes", "decode_eager_passes"}
SETTLE_S = 2.0  # how long to wait for the counters to count the window's last requests


def parse(text: str) -> dict:
    """A reading: every counter above summed over its label sets (the scheduler-side ones once per DP
    rank), decode passes by mode, and the ITL histogram ({"sum": s, "count": tokens, "buckets": {upper
    bound: cumulative tokens}})."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict = {key: 0.0 for key in COUNTERS.values()}
    out.update(decode_graph_passes=0.0, decode_eager_passes=0.0, itl={"sum": 0.0, "count": 0.0, "buckets": {}})
    ranked: dict = {}  # (key, dp_rank) -> {(tp_rank, pp_rank): value}: the scheduler-side counters
    for family in text_string_to_metric_families(text):
        name = family.name[:-6] if family.name.endswith("_total") else family.name  # an untyped counter keeps it
        if name in COUNTERS or name == PASSES:
            for s in family.samples:
                if not s.name.endswith("_total"):
                    continue
                key = COUNTERS.get(name) or MODES.get(s.labels.get("mode"))
                if key is None:
                    continue
                if key not in SCHEDULER_SIDE:
                    out[key] += s.value
                    continue
                ranks = (_rank(s.labels, "tp_rank"), _rank(s.labels, "pp_rank"))
                group = ranked.setdefault((key, s.labels.get("dp_rank")), {})
                group[ranks] = group.get(ranks, 0.0) + s.value
        elif family.name == ITL:
            itl = out["itl"]
            for s in family.samples:
                if s.name == ITL + "_sum":
                    itl["sum"] += s.value
                elif s.name == ITL + "_count":
                    itl["count"] += s.value
                elif s.name == ITL + "_bucket":
                    le = float(s.labels["le"])
                    itl["buckets"][le] = itl["buckets"].get(le, 0.0) + s.value
    for (key, _dp), group in ranked.items():  # one scheduler per DP rank: the lowest TP/PP rank's series
        out[key] += group[min(group)]
    return out


def _rank(labels: dict, name: str) -> int:
    try:
        return int(labels.get(name, 0))
    except ValueError:
        return 0


def difference(before: dict, after: dict) -> dict:
    """The account of the window between two readings: counts (ints) and the server's ITL over its
    tokens (`itl_ms`: mean and median, None without tokens)."""
    out = {key: int(round(after[key] - before[key])) for key in (*COUNTERS.values(), "decode_graph_passes",
                                                                 "decode_eager_passes")}
    out["itl_ms"] = itl_ms(before["itl"], after["itl"])
    return out


def itl_ms(before: dict, after: dict) -> Optional[dict]:
    """The mean and median inter-token latency (ms) over the tokens between two histogram readings (the
    median interpolated geometrically inside its bucket: sglang's buckets grow geometrically); None
    when no token was counted."""
    tokens = after["count"] - before["count"]
    if tokens <= 0:
        return None
    bounds = sorted(after["buckets"])
    cum = [after["buckets"][b] - before["buckets"].get(b, 0.0) for b in bounds]
    half, lo, below, median = tokens / 2, 0.0, 0.0, None
    for b, c in zip(bounds, cum):
        if c >= half:
            if not math.isfinite(b) or lo <= 0:
                median = b if math.isfinite(b) else lo
            else:
                median = lo * (b / lo) ** ((half - below) / (c - below))
            break
        lo, below = b, c
    return {"mean": 1000 * (after["sum"] - before["sum"]) / tokens,
            "median": 1000 * median if median is not None else None}


def tokens_per_verify(account: dict) -> Optional[float]:
    """Generated tokens per speculative verify pass over the window (the draft tokens accepted plus the
    one each pass adds, on average), None without speculative decoding. A variant whose acceptance
    moved is faster or slower for that reason, whatever its kernels did."""
    calls = account.get("spec_verify_calls") or 0
    return account["generation_tokens"] / calls if calls > 0 else None


def findings(account: dict, *, sent: int, client_tokens: int | None,
             device: str | None) -> tuple[list[str], list[str]]:
    """(problems, notes) of one window's account against what the client sent and counted (the
    measured requests; the completion tokens of all of them, None when some failed: their errors say
    it); `device` the server's (/server_info), which decides whether eager decode passes are news."""
    problems, notes = [], []
    finished = account["requests"]  # an aborted request is counted here too when it ends (and in aborted_requests)
    if finished > sent:
        problems.append(f"the server finished {finished} requests while the client sent {sent}: another client "
                        "used this server during the measurement")
    elif client_tokens is not None and account["requests"] == sent and account["generation_tokens"] != client_tokens:
        problems.append(f"the server generated {account['generation_tokens']} tokens for the {sent} requests, the "
                        f"client counted {client_tokens}")
    if finished < sent:
        notes.append(f"the server's counters showed {finished} of the {sent} requests within {SETTLE_S:g} s "
                     "after the last one ended: its account of this window is partial")
    if account["retracted_requests"]:
        notes.append(f"the server retracted {account['retracted_requests']} requests (KV cache short at this "
                     "concurrency): their tokens were computed again, inside the measured time")
    passes = account["decode_graph_passes"] + account["decode_eager_passes"]
    if (device or "").startswith("cuda") and account["decode_eager_passes"]:
        notes.append(f"{account['decode_eager_passes']} of {passes} decode passes ran without a CUDA graph "
                     "(a batch above --cuda-graph-max-bs, or graphs off): not the replayed step")
    if account["cached_tokens"] and account["prompt_tokens"]:
        share = account["cached_tokens"] / account["prompt_tokens"]
        notes.append(f"{share:.0%} of the prompt tokens came from the prefix cache: their prefill was not "
                     "computed (TTFT and input tok/s read low)")
    return problems, notes


def settled(before: dict, now: dict, sent: int) -> bool:
    """Whether a reading counts every request of the window as ended."""
    return now["requests"] - before["requests"] >= sent


async def read(session, base_url: str) -> Optional[dict]:
    """A reading of the server's /metrics, or None when it has none (not launched with
    --enable-metrics: HTTP 404) or cannot be read."""
    import aiohttp

    try:  # identity: sglang's exporter gzips for a client that accepts it, and the client's session does not inflate
        async with session.get(base_url + "/metrics", headers={"Accept-Encoding": "identity"},
                               timeout=aiohttp.ClientTimeout(total=30)) as r:
            if r.status != 200:
                return None
            return parse(await r.text())
    except (aiohttp.ClientError, OSError, ValueError):
        return None


def run_lines(runs, label: dict | None = None) -> list[str]:
    """One line per stored run and point whose account said something (compare's and report's
    "server:" lines): "demo/x run 1a2b3c4d c=16: 40 of 400 decode passes ran without a CUDA graph ..."."""
    label = label or {}
    out = []
    for r in runs:
        for point, acc in sorted(((r.extra or {}).get("server_account") or {}).items(), key=lambda kv: int(kv[0])):
            out += [f"{label.get(r.run_id, r.recipe)} run {r.run_id[:8]} c={point}: {line}"
                    for line in (acc or {}).get("notes", ())]
    return out
