"""toolkit.run.bench.server_account: the server's own account of a measured window (its /metrics),
read by the serving client and stored with every run (the client against the miniature's and real
sglang's /metrics: tests/test_serving_client.py, tests/contract_probes.py metrics_account)."""

from __future__ import annotations

import json

from toolkit.run.bench import server_account as account

TEXT = """# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="m",is_streaming="true"} 10.0
sglang:num_requests_total{model_name="m",is_streaming="false"} 2.0
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m",is_streaming="true"} 400.0
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m",is_streaming="true"} 640.0
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="m",cache_source="device"} 64.0
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{model_name="m"} 1.0
# TYPE sglang:cuda_graph_passes_total counter
sglang:cuda_graph_passes_total{model_name="m",mode="decode_cuda_graph"} 30.0
sglang:cuda_graph_passes_total{model_name="m",mode="decode_none"} 6.0
sglang:cuda_graph_passes_total{model_name="m",mode="prefill_none"} 4.0
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{model_name="m",le="0.01"} 100.0
sglang:inter_token_latency_seconds_bucket{model_name="m",le="0.02"} 380.0
sglang:inter_token_latency_seconds_bucket{model_name="m",le="+Inf"} 388.0
sglang:inter_token_latency_seconds_count{model_name="m"} 388.0
sglang:inter_token_latency_seconds_sum{model_name="m"} 5.82
"""


def test_a_reading_sums_label_sets_and_splits_decode_passes_by_graph():
    r = account.parse(TEXT)
    assert r["requests"] == 12 and r["generation_tokens"] == 400 and r["prompt_tokens"] == 640
    assert r["cached_tokens"] == 64 and r["retracted_requests"] == 1 and r["aborted_requests"] == 0
    assert r["decode_graph_passes"] == 30 and r["decode_eager_passes"] == 6  # prefill passes are not decode
    assert r["itl"]["count"] == 388 and r["itl"]["buckets"][0.02] == 380


def _scheduler_series(ranks, graph: int, eager: int, retracted: int) -> str:
    """sglang 0.5.23's scheduler-side counters as every scheduler process writes them: one series per
    (tp_rank, dp_rank[, pp_rank]) label set (metrics_collector.py's scheduler labels; dp_rank only under
    attention DP; a rank tuple's third entry is its PP stage, 0 when left out)."""
    labels = [f'model_name="m",tp_rank="{r[0]}",pp_rank="{r[2] if len(r) > 2 else 0}",moe_ep_rank="{r[0]}"'
              + (f',dp_rank="{r[1]}"' if r[1] is not None else "") for r in ranks]
    lines = ["# TYPE sglang:cuda_graph_passes_total counter"]
    lines += [f'sglang:cuda_graph_passes_total{{{lab},mode="decode_cuda_graph"}} {graph}.0' for lab in labels]
    lines += [f'sglang:cuda_graph_passes_total{{{lab},mode="decode_none"}} {eager}.0' for lab in labels]
    lines += ["# TYPE sglang:num_retracted_requests_total counter"]
    lines += [f'sglang:num_retracted_requests_total{{{lab}}} {retracted}.0' for lab in labels]
    return "\n".join(lines) + "\n"


def test_scheduler_side_counters_count_once_per_dp_rank_not_once_per_tp_or_pp_rank():
    """Every TP rank of sglang 0.5.23 counts the same decode passes and retractions under its own tp_rank
    label: TP8 reads them once; attention DP (dp_rank labels) sums its DP ranks; DP 2 x attention TP 4
    reads one TP rank per DP rank."""
    tp8 = account.parse(_scheduler_series([(r, None) for r in range(8)], graph=100, eager=5, retracted=2))
    assert (tp8["decode_graph_passes"], tp8["decode_eager_passes"], tp8["retracted_requests"]) == (100, 5, 2)
    dp8 = account.parse(_scheduler_series([(r, r) for r in range(8)], graph=100, eager=5, retracted=2))
    assert (dp8["decode_graph_passes"], dp8["decode_eager_passes"], dp8["retracted_requests"]) == (800, 40, 16)
    dp2 = account.parse(_scheduler_series([(r, r // 4) for r in range(8)], graph=100, eager=5, retracted=2))
    assert (dp2["decode_graph_passes"], dp2["retracted_requests"]) == (200, 4)
    # pipeline parallel: every PP stage's scheduler runs event_loop_pp and counts each decode batch it
    # processes (batch_result_processor.py process_batch_result_decode; no stage check): TP4 x PP2 reads one
    pp2 = account.parse(_scheduler_series([(tp, None, pp) for pp in range(2) for tp in range(4)],
                                          graph=100, eager=5, retracted=2))
    assert (pp2["decode_graph_passes"], pp2["decode_eager_passes"], pp2["retracted_requests"]) == (100, 5, 2)


def test_the_window_is_the_difference_and_its_median_lies_in_its_bucket():
    zero = account.parse("")
    window = account.difference(zero, account.parse(TEXT))
    assert window["requests"] == 12 and window["decode_eager_passes"] == 6
    assert window["itl_ms"]["mean"] == 1000 * 5.82 / 388
    assert 10 < window["itl_ms"]["median"] < 20  # 194th of 388 tokens: in (10, 20] ms
    assert account.difference(zero, zero)["itl_ms"] is None  # no token: no latency


def _window(**kw):
    base = {"requests": 8, "prompt_tokens": 8 * 24, "generation_tokens": 8 * 20, "cached_tokens": 0,
            "aborted_requests": 0, "retracted_requests": 0, "decode_graph_passes": 150, "decode_eager_passes": 0,
            "itl_ms": {"mean": 21.0, "median": 21.0}}
    return {**base, **kw}


def test_what_the_account_says_beside_the_client():
    assert account.findings(_window(), sent=8, client_tokens=160, device="cuda") == ([], [])
    problems, _ = account.findings(_window(requests=9), sent=8, client_tokens=160, device="cuda")
    assert problems == ["the server finished 9 requests while the client sent 8: another client used this "
                        "server during the measurement"]
    problems, _ = account.findings(_window(generation_tokens=150), sent=8, client_tokens=160, device="cuda")
    assert problems == ["the server generated 150 tokens for the 8 requests, the client counted 160"]
    # some requests failed on the client: their own errors say so, the token count is not compared
    assert account.findings(_window(generation_tokens=150), sent=8, client_tokens=None, device="cuda")[0] == []
    _, notes = account.findings(_window(retracted_requests=2, decode_eager_passes=10, cached_tokens=48),
                                sent=8, client_tokens=160, device="cuda")
    assert notes[0].startswith("the server retracted 2 requests")
    assert notes[1].startswith("10 of 160 decode passes ran without a CUDA graph")
    assert notes[2].startswith("25% of the prompt tokens came from the prefix cache")
    # a CPU server never replays graphs: not news there
    assert account.findings(_window(decode_graph_passes=0, decode_eager_passes=150), sent=8, client_tokens=160,
                            device="cpu") == ([], [])
    _, notes = account.findings(_window(requests=6), sent=8, client_tokens=160, device="cuda")
    assert notes == ["the server's counters showed 6 of the 8 requests within 2 s after the last one ended: its "
                     "account of this window is partial"]


def test_every_run_stores_the_servers_account_of_each_point(tmp_path, monkeypatch, home, capsys):
    """A recipe passing enable-metrics (the demo's own do not: tests/data's stored demo runs keep their
    identity): each concurrency point's window is stored with the run, exactly its measured requests
    (warm-up excluded), their tokens, the step's ITL as the server saw it."""
    from conftest import demo_project
    from toolkit.cli import main
    from toolkit.recipe.load import load_recipe
    from toolkit.results.store import Store

    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "counted.toml").write_text(
        'extends = "demo/baseline"\n[server.args]\nenable-metrics = true\ncuda-graph-max-bs = 2\n')
    assert main(["run", "demo/counted", "--repeats", "1"]) == 0
    bench = load_recipe("demo/counted", proj / "recipes").benchmark
    store = Store(home / "results.sqlite")
    (run,) = store.runs()
    completed = {s.point: s.value for s in store.samples(run.run_id, "completed")}
    accounts = run.extra["server_account"]
    assert sorted(accounts, key=int) == [str(c) for c in bench.concurrency]
    for c, a in accounts.items():
        n = completed[int(c)]
        assert a["requests"] == n and a["generation_tokens"] == n * bench.output_len and a["problems"] == []
        assert a["itl_ms"]["mean"] > 0
        # the miniature says cuda: a batch of 1 replays a graph, one above --cuda-graph-max-bs 2 runs eager (said)
        assert (a["decode_graph_passes"] > 0) if int(c) == 1 else (a["decode_eager_passes"] > 0), a
        assert bool(a["notes"]) == (int(c) > 2)
    # compare and report carry what the server said, beside the box lines
    assert main(["run", "demo/baseline", "--repeats", "1"]) == 0
    capsys.readouterr()
    assert main(["compare", "demo/baseline", "demo/counted", "--json"]) == 0
    lines = json.loads(capsys.readouterr().out)["server"]
    assert lines and all(line.startswith(f"demo/counted run {run.run_id[:8]} c=") for line in lines), lines
    assert any("decode passes ran without a CUDA graph" in line for line in lines)


def test_speculative_acceptance_is_read_from_the_windows_verify_passes():
    """sglang 0.5.23's tokenizer manager adds each finished request's verify passes to
    sglang:spec_verify_calls_total; the text below is what prometheus-client writes for it."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    reg = CollectorRegistry()
    labels = {"model_name": "m"}
    verify = Counter("sglang:spec_verify_calls", "verify calls", labelnames=list(labels), registry=reg)
    tokens = Counter("sglang:generation_tokens", "tokens", labelnames=[*labels, "is_streaming"], registry=reg)
    requests = Counter("sglang:num_requests", "requests", labelnames=[*labels, "is_streaming"], registry=reg)
    before = account.parse(generate_latest(reg).decode())
    assert account.tokens_per_verify(account.difference(before, before)) is None  # no speculation: no metric
    for _ in range(8):  # eight requests of 64 tokens, each in 20 verify passes
        verify.labels(**labels).inc(20)
        tokens.labels(**labels, is_streaming="true").inc(64)
        requests.labels(**labels, is_streaming="true").inc()
    window = account.difference(before, account.parse(generate_latest(reg).decode()))
    assert window["spec_verify_calls"] == 160 and window["generation_tokens"] == 512
    assert account.tokens_per_verify(window) == 3.2


def test_a_points_compiles_and_unflushed_cache_join_its_account():
    """toolkit.run.bench.point_record: notes beside the server's own, kept in the point's account (one
    made for a point the server did not count) and said in point order."""
    from toolkit.run.bench.point import PointResult
    from toolkit.run.bench.point_record import gather

    counted = PointResult(1, 8, metrics={"output_tok_s": 10.0}, server={"requests": 8, "notes": ["retracted 1"]},
                          prefix_cache="flushed", compiled_files=3)
    uncounted = PointResult(8, 8, metrics={"output_tok_s": 40.0}, prefix_cache="not flushed: HTTP 400")
    samples, errors, accounts, said = gather([counted, uncounted])
    assert [s.metric for s in samples] == ["output_tok_s", "output_tok_s"] and errors == []
    assert accounts["1"]["compiled_files"] == 3 and accounts["1"]["prefix_cache"] == "flushed"
    assert accounts["1"]["notes"][0] == "retracted 1" and "3 file(s) appeared" in accounts["1"]["notes"][1]
    assert accounts["8"] == {"prefix_cache": "not flushed: HTTP 400", "notes": [said[-1][1]]}
    assert [c for c, _ in said] == [1, 1, 8] and said[0][1] == "the server says retracted 1"
