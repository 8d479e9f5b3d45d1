"""toolkit.run.bench.serving and toolkit.run.bench.one_batch: real miniature servers on localhost, and the
pure parts (statistics, importers, argv)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.run.bench import Sample
from toolkit.results.metrics import higher_is_better
from toolkit.run.bench.one_batch import (
    find_one_batch_module,
    one_batch_argv,
    parse_bench_serving_jsonl,
    parse_one_batch_jsonl,
)
from toolkit.run.bench.serving import (
    PointResult,
    RequestResult,
    ServingConfig,
    _int_field,
    make_prompt,
    percentile,
    run_serving,
    summarize,
)
from toolkit.errors import BadInput, PatchbenchError

from conftest import MINI_PY, mini_env, mini_tu, patched_mini



tu = mini_tu


@pytest.fixture
def launch(tmp_path):
    procs = []

    def _launch(*args, pythonpath: Path = MINI_PY):
        port = tu.find_free_port()
        url = f"http://127.0.0.1:{port}"
        env = mini_env(pythonpath)
        proc = tu.popen_launch_server("m", url, timeout=30,
                                      other_args=["--log-level", "warning", *args], env=env,
                                      log_path=str(tmp_path / f"server-{port}.log"),
                                      package_root=str(pythonpath))
        procs.append(proc)
        return url

    yield _launch
    for p in procs:
        tu.kill_process_tree(p.pid)


STEP = ["--mini-step-base-ms", "4", "--mini-step-per-seq-us", "100",
        "--mini-prefill-base-ms", "1", "--mini-prefill-per-token-us", "0"]
# For the timing checks: steps long against the few ms a busy host (parallel tests) may delay the
# client reading a token, which would bunch two tokens and blur the median inter-token latency.
TIMED = ["--mini-step-base-ms", "20", "--mini-step-per-seq-us", "1000",
         "--mini-prefill-base-ms", "1", "--mini-prefill-per-token-us", "0"]


def _check_point(p: PointResult, n: int, output_len: int):
    assert p.errors == [], p.errors
    m = p.metrics
    assert m["completed"] == n and m["failed"] == 0
    assert m["output_tok_s"] > 0 and m["request_s"] > 0
    for k in ("ttft_ms_mean", "ttft_ms_median", "ttft_ms_p99", "itl_ms_mean", "itl_ms_median",
              "itl_ms_p99", "tpot_ms_mean", "e2e_ms_mean", "e2e_ms_p99"):
        assert m[k] > 0, k
    assert p.units["output_tok_s"] == "tok/s" and p.units["itl_ms_p99"] == "ms"
    samples = p.to_samples()
    assert all(isinstance(s, Sample) and s.point == p.concurrency
               and s.point_kind == "concurrency" for s in samples)
    assert {s.metric for s in samples} == set(m)


def test_sweep_generate_counts_and_timing(launch):
    url = launch(*TIMED)
    cfg = ServingConfig(input_len=24, output_len=20, concurrency=(1, 4), num_prompts=8, warmup=1)
    calls = []
    res = run_serving(url, cfg, progress=lambda *a: calls.append(a))
    assert [p.concurrency for p in res] == [1, 4]
    assert ("warmup", 1, 1, 1) in calls and ("measure", 4, 8, 8) in calls
    for p in res:
        _check_point(p, 8, 20)
        assert p.requests == 8
        # the completion tokens cross-check held: output tok/s is consistent with 20 tokens each
        assert p.metrics["output_tok_s"] == pytest.approx(
            20 * p.metrics["request_s"], rel=1e-9)
        assert p.metrics["input_tok_s"] == pytest.approx(24 * p.metrics["request_s"], rel=1e-9)
    # the decode step is 20 ms + 1 ms per running sequence
    assert res[0].metrics["itl_ms_median"] == pytest.approx(21, rel=0.15)
    assert res[1].metrics["itl_ms_median"] == pytest.approx(24, rel=0.15)


def test_the_servers_own_account_of_each_window(launch):
    """With --enable-metrics the client reads the server's /metrics after each point's warm-up and after
    its measured requests: the account covers exactly the measured requests (warm-up excluded), counts
    the tokens the client counted, times the step as the client did, and says which decode passes ran
    without a CUDA graph (concurrency 4 above --cuda-graph-max-bs 2)."""
    url = launch(*TIMED, "--enable-metrics", "--cuda-graph-max-bs", "2")
    cfg = ServingConfig(input_len=24, output_len=20, concurrency=(1, 4), num_prompts=8, warmup=2)
    one, four = run_serving(url, cfg)
    for p in (one, four):
        a = p.server
        assert p.errors == [] and a["problems"] == [], p.errors
        assert a["requests"] == 8 and a["generation_tokens"] == 8 * 20 and a["prompt_tokens"] == 8 * 24
        assert a["itl_ms"]["mean"] == pytest.approx(p.metrics["itl_ms_mean"], rel=0.1)
    assert one.server["decode_eager_passes"] == 0 and one.server["decode_graph_passes"] >= 8 * 19
    assert four.server["decode_eager_passes"] > 0 and four.to_dict()["server"] == four.server
    assert any("decode passes ran without a CUDA graph" in n for n in four.server["notes"])
    assert one.server["notes"] == []


def test_a_foreign_client_during_the_window_fails_the_point_and_no_metrics_means_no_account(launch):
    import threading
    import urllib.request

    url = launch(*TIMED, "--enable-metrics")
    body = json.dumps({"input_ids": [5] * 8, "sampling_params": {"max_new_tokens": 10, "ignore_eos": True}}).encode()
    started = threading.Event()

    def other():  # starts when the first measured request ends (of 2 rounds of 40 steps), ends 10 steps later
        started.wait(30)
        req = urllib.request.Request(url + "/generate", data=body, headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=60).read()

    t = threading.Thread(target=other)
    t.start()
    cfg = ServingConfig(input_len=16, output_len=40, concurrency=(2,), num_prompts=4, warmup=0)
    try:
        (p,) = run_serving(url, cfg, progress=lambda phase, c, done, total: started.set())
    finally:
        started.set()
        t.join()
    assert p.server["requests"] == 5 and p.metrics["completed"] == 4
    assert any("finished 5 requests while the client sent 4" in e for e in p.errors), p.errors
    (q,) = run_serving(launch(*STEP), ServingConfig(input_len=8, output_len=4, concurrency=(2,), num_prompts=2,
                                                    warmup=0))
    assert q.server is None and q.errors == [] and q.to_dict()["server"] is None


@pytest.mark.parametrize("prompt", ["input_ids", "text"])
def test_completions_endpoint_and_prompt_kinds(launch, prompt):
    url = launch(*STEP)
    cfg = ServingConfig(input_len=16, output_len=8, concurrency=(2,), num_prompts=4, warmup=0,
                        endpoint="completions", prompt=prompt)
    (p,) = run_serving(url, cfg)
    _check_point(p, 4, 8)


def test_non_stream_mode(launch):
    url = launch(*STEP)
    cfg = ServingConfig(input_len=8, output_len=6, concurrency=(2,), num_prompts=4, warmup=0,
                        stream=False)
    (p,) = run_serving(url, cfg)
    assert p.errors == []
    assert p.metrics["ttft_ms_mean"] == pytest.approx(p.metrics["e2e_ms_mean"])
    assert "itl_ms_mean" not in p.metrics


def test_multi_token_chunks_and_token_mismatch(launch):
    # --stream-interval 4: chunks carry several tokens; --context-length caps max_new_tokens
    # silently (as sglang's scheduler does), which the cross-check must catch.
    url = launch(*TIMED, "--stream-interval", "4", "--context-length", "40")
    ok = ServingConfig(input_len=10, output_len=17, concurrency=(2,), num_prompts=4, warmup=0)
    (p,) = run_serving(url, ok)
    _check_point(p, 4, 17)
    assert p.metrics["itl_ms_median"] == pytest.approx(22, rel=0.15)
    bad = ServingConfig(input_len=16, output_len=32, concurrency=(2,), num_prompts=4, warmup=0)
    (p,) = run_serving(url, bad)
    assert p.metrics["completed"] == 0 and p.metrics["failed"] == 4
    assert any("completion_tokens=23" in e and "output_len=32" in e for e in p.errors), p.errors


def test_faster_cost_constant_gives_higher_tok_s(launch, tmp_path):
    """Patch STEP_BASE_S in a copy of the miniature: the client measures the speed-up."""
    patched = patched_mini(tmp_path / "patched", "STEP_BASE_S = 0.012\n", "STEP_BASE_S = 0.006\n")
    base = launch()
    fast = launch(pythonpath=patched)
    cfg = ServingConfig(input_len=16, output_len=12, concurrency=(1, 4), num_prompts=4, warmup=0)
    # The miniature paces its steps on deadlines, so a loaded box only ever makes a measurement
    # slower: the best of two is each server's speed. (ITL is left out: a client that falls behind
    # reads tokens in bunches, which shortens the gaps it sees.)
    best = lambda url: [max(pts, key=lambda r: r.metrics["output_tok_s"])  # noqa: E731
                        for pts in zip(run_serving(url, cfg), run_serving(url, cfg))]
    for a, b in zip(best(base), best(fast)):
        assert a.errors == [] and b.errors == []
        assert b.metrics["output_tok_s"] > 1.3 * a.metrics["output_tok_s"]  # ~1.9x expected


def test_server_crash_is_recorded_and_stops_the_sweep(launch):
    url = launch(*STEP, "--mini-crash-after-requests", "3")
    cfg = ServingConfig(input_len=8, output_len=8, concurrency=(1, 2, 4), num_prompts=5,
                        warmup=0, timeout_s=20)
    res = run_serving(url, cfg)
    assert res[0].metrics["completed"] == 3
    assert res[0].metrics["failed"] == 2
    assert res[0].errors
    assert len(res) == 2  # stopped after the point where nothing succeeded
    assert res[1].metrics["completed"] == 0
    assert "sweep stopped" in res[1].errors[-1]


def test_unreachable_server():
    port = tu.find_free_port()
    cfg = ServingConfig(input_len=4, output_len=4, concurrency=(1, 2), num_prompts=2, warmup=0,
                        timeout_s=5)
    res = run_serving(f"http://127.0.0.1:{port}", cfg)
    assert len(res) == 1 and res[0].metrics["completed"] == 0
    assert any("ClientConnectorError" in e or "Connect" in e for e in res[0].errors)


# -- pure parts ------------------------------------------------------------------------------------
def test_config_validation_and_defaults():
    cfg = ServingConfig()
    assert cfg.concurrency == tuple(2**i for i in range(11))
    assert cfg.requests_at(1) == 8 and cfg.requests_at(64) == 256
    assert ServingConfig(num_prompts=5).requests_at(64) == 5
    for bad in (dict(endpoint="chat"), dict(concurrency=()), dict(concurrency=(0,)),
                dict(input_len=0), dict(prompt="tokens")):
        with pytest.raises(BadInput):
            ServingConfig(**bad)


def test_prompts_are_deterministic_exact_and_distinct():
    cfg = ServingConfig(input_len=50, seed=3)
    a = make_prompt("text", cfg, 4, 0)
    assert a == make_prompt("text", cfg, 4, 0)
    assert len(a.split()) == 50
    assert a != make_prompt("text", cfg, 4, 1) and a != make_prompt("text", cfg, 8, 0)
    ids = make_prompt("input_ids", cfg, 4, 0)
    assert len(ids) == 50 and all(1000 <= t < 31000 for t in ids)
    assert ids != make_prompt("input_ids", ServingConfig(input_len=50, seed=4), 4, 0)


def test_percentile_matches_numpy_linear():
    v = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert percentile(v, 50) == 3.0
    assert percentile(v, 99) == pytest.approx(4 + 6 * 0.96)
    assert percentile([5.0], 99) == 5.0


def test_summarize():
    rs = [RequestResult(ok=True, start=0.0, prompt_tokens=10, completion_tokens=5, ttft=0.1,
                        e2e=0.5, itl=[0.1] * 4) for _ in range(3)]
    rs.append(RequestResult(ok=False, error="HTTP 500: boom"))
    p = summarize(2, rs, 1.0, ["warmup: x"])
    m = p.metrics
    assert m["completed"] == 3 and m["failed"] == 1
    assert m["output_tok_s"] == 15 and m["request_s"] == 3 and m["input_tok_s"] == 30
    assert m["ttft_ms_mean"] == pytest.approx(100) and m["itl_ms_p99"] == pytest.approx(100)
    assert m["tpot_ms_mean"] == pytest.approx(100) and m["e2e_ms_median"] == pytest.approx(500)
    assert m["concurrency_achieved"] == pytest.approx(1.5)
    assert p.errors == ["1 x HTTP 500: boom", "1 x warmup: x"]
    assert not p.ok


def test_int_field_is_not_fooled_by_text():
    ev = (b'{"text":" say \\"completion_tokens\\": 99","meta_info":{"id":"x",'
          b'"completion_tokens": 12,"prompt_tokens":3}}')
    assert _int_field(ev, b'"completion_tokens"') == 12
    assert _int_field(ev, b'"prompt_tokens"') == 3
    assert _int_field(b'{"a":1}', b'"completion_tokens"') is None


def test_sample_roundtrip_and_direction():
    s = Sample("decode_tok_s", 12.5, "tok/s", 4, "batch")
    assert Sample.from_dict(s.to_dict()) == s
    with pytest.raises(ValueError):
        Sample("x", 1.0, "", 1, "rate")
    assert higher_is_better("output_tok_s") and higher_is_better("request_s")
    assert not higher_is_better("itl_ms_p99") and not higher_is_better("failed")


def test_one_batch_module_is_the_one_the_env_has(tmp_path):
    """Chosen by what exists, never by version: a fork reporting 0.5.23 may keep the old name."""
    import os
    import sys

    from conftest import MINI_PY

    def env(path):
        return {**os.environ, "PYTHONPATH": str(path)}

    assert find_one_batch_module(sys.executable, env(MINI_PY)) == "sglang.bench_one_batch"
    new = tmp_path / "new" / "sglang" / "benchmark"
    new.mkdir(parents=True)
    for d in (new.parent, new):
        (d / "__init__.py").write_text("")
    (new / "one_batch.py").write_text("")
    assert find_one_batch_module(sys.executable, env(tmp_path / "new")) == "sglang.benchmark.one_batch"
    with pytest.raises(PatchbenchError, match="no static-batch benchmark"):
        find_one_batch_module(sys.executable, env(tmp_path / "nothing"))


def test_one_batch_argv():
    argv = one_batch_argv(python="/env/bin/python", module="sglang.benchmark.one_batch", model_path="/m",
                          batch_sizes=[1, 2, 4], input_len=128, output_len=32,
                          result_filename="/o.jsonl", run_name="r",
                          server_argv=["--tp-size", "8", "--ep-size", "8"])
    assert argv == ["/env/bin/python", "-m", "sglang.benchmark.one_batch", "--model-path", "/m",
                    "--tp-size", "8", "--ep-size", "8", "--batch-size", "1", "2", "4",
                    "--input-len", "128", "--output-len", "32", "--result-filename", "/o.jsonl",
                    "--run-name", "r"]
    argv = one_batch_argv(python="p", module="sglang.bench_one_batch", batch_sizes=[1], input_len=1,
                          output_len=2, result_filename="o", server_argv=["--model-path", "/x"])
    assert argv.count("--model-path") == 1 and argv[2] == "sglang.bench_one_batch"
    with pytest.raises(BadInput):
        one_batch_argv(python="p", module="sglang.bench_one_batch", batch_sizes=[1], input_len=1,
                       output_len=2, result_filename="o")


def test_parse_one_batch_rows_shapes(tmp_path):
    rows = [
        {"run_name": "a", "batch_size": 1, "input_len": 128, "output_len": 32,
         "prefill_latency": 0.02, "prefill_throughput": 6400.0, "median_decode_latency": 0.01,
         "median_decode_throughput": 100.0, "total_latency": 0.33,
         "overall_throughput": 484.8},
        {"run_name": "a", "batch_size": 8, "input_len": 128, "output_len": 32,
         "prefill_latency": 0.05, "prefill_throughput": 20480.0, "median_decode_latency": 0.012,
         "median_decode_throughput": 666.7, "total_latency": 0.42,
         "overall_throughput": 3047.6},
        {"run_name": "a", "batch_size": 1, "input_len": 512, "output_len": 32,
         "prefill_latency": 0.05, "median_decode_latency": 0.01,
         "median_decode_throughput": 100.0},
    ]
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    with pytest.raises(BadInput):
        parse_one_batch_jsonl(f)
    samples = parse_one_batch_jsonl(f, input_len=128)
    by = {(s.metric, s.point): s for s in samples}
    assert by[("decode_tok_s", 8)].value == 666.7
    assert by[("decode_step_ms_median", 8)].value == pytest.approx(12.0)
    assert by[("prefill_ms", 1)].unit == "ms" and by[("total_ms", 1)].value == pytest.approx(330)
    assert len(parse_one_batch_jsonl(f, input_len=512)) == 3
    with pytest.raises(BadInput):
        parse_one_batch_jsonl('{"x": 1}\n')


def test_parse_bench_serving_jsonl():
    row = {"backend": "sglang", "dataset_name": "random", "request_rate": float("inf"),
           "max_concurrency": 16, "random_input_len": 1024, "random_output_len": 128,
           "duration": 12.5, "completed": 64, "total_input_tokens": 65536,
           "total_output_tokens": 8192, "request_throughput": 5.12, "input_throughput": 5242.9,
           "output_throughput": 655.4, "mean_e2e_latency_ms": 3100.0,
           "median_e2e_latency_ms": 3050.0, "p99_e2e_latency_ms": 3400.0, "mean_ttft_ms": 210.0,
           "median_ttft_ms": 200.0, "p99_ttft_ms": 420.0, "mean_tpot_ms": 22.0,
           "median_tpot_ms": 21.5, "p99_tpot_ms": 30.1, "mean_itl_ms": 22.1,
           "median_itl_ms": 21.0, "p95_itl_ms": 25.0, "p99_itl_ms": 40.2,
           "concurrency": 15.8, "accept_length": None}
    text = json.dumps(row) + "\n" + json.dumps(dict(row, max_concurrency=32)) + "\n"
    samples = parse_bench_serving_jsonl(text)
    by = {(s.metric, s.point): s for s in samples}
    assert by[("output_tok_s", 16)].value == 655.4 and by[("output_tok_s", 16)].unit == "tok/s"
    assert by[("itl_ms_p99", 32)].value == 40.2 and by[("itl_ms_p99", 32)].unit == "ms"
    assert by[("e2e_ms_median", 16)].value == 3050.0
    assert by[("completed", 16)].value == 64
    assert all(s.point_kind == "concurrency" for s in samples)
    with pytest.raises(BadInput):
        parse_bench_serving_jsonl('{"batch_size": 1}\n')


def test_one_batch_failure_names_the_exception_and_skipped_batches_are_missing(tmp_path):
    """A failed benchmark's message is its exception line, not exit-time noise printed after it;
    a batch size sglang skipped (its KV pool cannot hold it: no row) is reported missing."""
    import os
    import sys

    from toolkit.run.bench import Sample
    from toolkit.run.bench.one_batch import OneBatchFailed, missing_batch_sizes, run_one_batch

    script = ("import sys; print('Traceback (most recent call last):'); print('IndexError: index out of range in self');"
              "print('shim: exit-time note'); sys.exit(1)")
    with pytest.raises(OneBatchFailed, match=r"code 1: IndexError: index out of range in self \[log"):
        run_one_batch([sys.executable, "-c", script], log=tmp_path / "ob.log", environ=dict(os.environ), timeout_s=60)
    samples = [Sample("decode_tok_s", 1.0, "tok/s", 1, "batch")]
    assert missing_batch_sizes(samples, [1, 8]) == [8]


def test_flush_cache_and_warmup_fill_start_each_point_empty_and_at_its_batch_size(launch):
    """`[benchmark] flush_cache`: POST /flush_cache before each point's warm-up (said per point);
    `warmup_fill`: the warm-up sends max(warmup, c) requests at c in flight, so the server counted
    2 + 6 warm-up requests at concurrency 1 and 6 (the measured windows exclude them)."""
    import urllib.request

    from toolkit.run.bench import server_account as account

    url = launch(*STEP, "--enable-metrics")

    def served() -> float:
        with urllib.request.urlopen(url + "/metrics") as r:
            return account.parse(r.read().decode())["requests"]

    before = served()
    cfg = ServingConfig(input_len=16, output_len=8, concurrency=(1, 6), num_prompts=8, warmup=2, flush_cache=True,
                        warmup_fill=True)
    points = run_serving(url, cfg)
    assert [p.prefix_cache for p in points] == ["flushed", "flushed"]
    assert all(p.errors == [] and p.server["requests"] == 8 for p in points)
    assert served() - before == (2 + 8) + (6 + 8)
    assert cfg.warmup_at(1) == 2 and cfg.warmup_at(6) == 6 and ServingConfig(warmup=2).warmup_at(6) == 2


def test_files_the_servers_jit_caches_gained_during_a_window_are_counted(launch, tmp_path):
    """`compiled` is read just before and just after each measured window (warm-up outside it): a
    kernel compiled while measured shows as files gained in that window."""
    from toolkit.envs.manifest import jit_file_count

    url = launch(*STEP)
    jit = tmp_path / "env"
    (jit / "jit" / "triton").mkdir(parents=True)
    reads = []

    def compiled() -> int:
        reads.append(1)
        if len(reads) == 2:  # the first window: a kernel lands in the cache while it runs
            (jit / "jit" / "triton" / "kernel.cubin").write_bytes(b"x")
        return jit_file_count(jit)

    one, two = run_serving(url, ServingConfig(input_len=16, output_len=8, concurrency=(1, 2), num_prompts=4,
                                              warmup=1), compiled=compiled)
    assert (one.compiled_files, two.compiled_files) == (1, 0) and len(reads) == 4


def test_events_one_read_delivers_share_the_gap_a_lagging_client_saw():
    """A client that lags the server (a busy host; many streams on one event loop) reads several steps'
    events in one chunk. Their tokens arrived together and share the gap since the last read; timed
    apart, the first took the whole gap and the others 0 ms (median ITL 0, p99 a multiple of it)."""
    import asyncio

    import aiohttp
    from aiohttp import web

    from toolkit.run.bench.serving import _timed

    def event(n: int) -> bytes:
        return b"data: " + json.dumps({"text": "x", "meta_info": {"completion_tokens": n, "prompt_tokens": 4}}).encode() + b"\n\n"

    async def generate(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(event(1))
        for n in range(2, 13, 3):  # three steps' events per write, 30 ms apart: 10 ms a token
            await asyncio.sleep(0.03)  # the server's pacing between writes (what a lagging client sees)
            await resp.write(b"".join(event(m) for m in range(n, n + 3)))
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def main():
        app = web.Application()
        app.router.add_post("/generate", generate)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            async with aiohttp.ClientSession() as session:
                cfg = ServingConfig(input_len=4, output_len=13, concurrency=(1,), warmup=0)
                return await _timed(session, f"http://127.0.0.1:{port}/generate", b"{}", cfg, 4, 13,
                                    aiohttp.ClientTimeout(total=30), None)
        finally:
            await runner.cleanup()

    res = asyncio.run(main())
    assert res.ok, res.error
    assert len(res.itl) == 12  # every token after the first
    # about 10 ms each (a busy host may shift a read), none 0
    assert min(res.itl) > 0 and sorted(res.itl)[6] == pytest.approx(0.01, rel=0.5)
