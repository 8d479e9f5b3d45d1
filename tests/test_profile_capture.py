"""`patchbench profile`'s capture against a real server (the miniature, which answers /start_profile
at once and stops by itself after num_steps, as sglang 0.5.23): recording starts only once every
request of the load is decoding, the capture waits for the trace files the server writes, never calls
/stop_profile after an auto-stop, and a trace with fewer decode steps than asked is reported short."""

from __future__ import annotations

import asyncio
import gzip
from pathlib import Path

import pytest
from rich.console import Console

from conftest import MINI_PY, base_torch_python, mini_env, mini_tu
from toolkit.profile.breakdown import step_spans
from toolkit.profile.capture import TraceWatch, capture, profile_body, rank_files, short_trace
from toolkit.profile.session import capture_status
from toolkit.profile.trace import load_trace
from toolkit.run.bench.inflight import InFlight
from toolkit.run.bench.serving import ServingConfig

BODY_FIELDS = ("output_dir", "num_steps", "activities", "record_shapes", "profile_id", "profile_prefix")


@pytest.fixture
def slow_ramp(tmp_path):
    """A miniature whose ramp-up is long: one request admitted per prefill step, each prefill 40 ms."""
    port = mini_tu.find_free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    proc = mini_tu.popen_launch_server(
        "/models/mini", base, 60, env=mini_env(), log_path=str(log), python=str(base_torch_python()),
        package_root=str(MINI_PY),
        other_args=["--log-level", "info", "--max-prefill-tokens", "32", "--mini-prefill-base-ms", "40",
                    "--mini-step-base-ms", "5"])
    yield base, log
    mini_tu.kill_process_tree(proc.pid)


def _cfg(output_len: int, concurrency: int = 4) -> ServingConfig:
    return ServingConfig(input_len=32, output_len=output_len, concurrency=(concurrency,),
                         num_prompts=2 * concurrency, warmup=0, timeout_s=120)


def _run(base: str, out: Path, steps: int, output_len: int, log: Path):
    body = profile_body(BODY_FIELDS, output_dir=str(out), num_steps=steps, profile_id="cap", gpu=False)
    return capture(base, _cfg(output_len), body, steps, out, timeout=120, console=Console(quiet=True), log=log)


def test_profile_starts_at_steady_decode_and_waits_for_the_auto_stop(slow_ramp, tmp_path):
    base, log = slow_ramp
    cap = _run(base, tmp_path / "traces", 10, 64, log)
    assert cap.errors == [] and cap.notes == [], (cap.errors, cap.notes)
    [trace] = cap.traces
    assert trace.name == "patchbench-cap-TP-0.trace.json.gz"
    with gzip.open(trace, "rb") as fh:  # complete: it reads to its end
        fh.read()
    names = [e.name for e in step_spans(load_trace(trace), stage=None)]
    # Every recorded step is a decode over all four requests: none of the ramp's prefills or smaller batches.
    assert names == ["step[DECODE bs=4]"] * 10, names
    assert cap.steady_after_s is not None and cap.steady_after_s >= 0.12  # four 40 ms prefills came first
    text = log.read_text()
    assert "Profiling armed" in text and "not in progress" not in text  # no /stop_profile after the auto-stop
    assert short_trace([{"rank": 0, "steps": len(names)}], 10) is None


def test_a_load_that_ends_first_is_flushed_and_reported_short(slow_ramp, tmp_path):
    base, log = slow_ramp
    cap = _run(base, tmp_path / "traces", 200, 24, log)  # 200 steps asked, the load has about 46
    assert cap.errors == [] and cap.traces, (cap.errors, cap.notes)
    steps = len(step_spans(load_trace(cap.traces[0])))
    assert 0 < steps < 200
    short = short_trace([{"rank": 0, "steps": steps}], 200)
    assert short == f"short trace: rank 0: {steps} decode step(s) of 200 asked"
    status, error = capture_status(True, short, cap.errors, tmp_path)
    assert (status, error) == ("invalid", short)


def test_a_run_with_traces_is_never_failed(tmp_path):
    assert capture_status(True, None, [], tmp_path) == ("ok", None)
    assert capture_status(True, None, ["/stop_profile answered 500"], tmp_path)[0] == "invalid"
    status, error = capture_status(False, None, [], tmp_path)
    assert status == "failed" and str(tmp_path) in error


def test_steady_means_every_request_in_flight_is_decoding():
    async def scenario():
        flight = InFlight()
        tickets = [flight.request() for _ in range(3)]
        assert not flight.steady(4)  # three of four sent
        tickets.append(flight.request())
        waiter = asyncio.ensure_future(flight.wait_steady(4, timeout=5))
        for t in tickets[:3]:
            t.received(1)
        await asyncio.sleep(0)
        assert not waiter.done() and not flight.steady(4)  # one still in prefill
        tickets[3].received(1)
        assert await waiter and flight.steady(4)
        tickets[0].close()
        assert not flight.steady(4) and flight.decoding == 3
        assert not await flight.wait_steady(4, timeout=0.05)

    asyncio.run(scenario())


def test_trace_watch_waits_for_every_rank_and_a_complete_file(tmp_path):
    watch = TraceWatch(tmp_path, ranks=2, profile_id="p1")
    (tmp_path / "patchbench-p1-TP-0.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}')[:-8])
    assert watch.poll() == [0, 1] and watch.poll() == [0, 1]  # truncated gzip: never complete
    (tmp_path / "patchbench-p1-TP-0.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    (tmp_path / "patchbench-p1-TP-1-PP-0.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    assert watch.poll() == [0, 1]  # sizes seen once: not yet stable
    assert watch.poll() == []
    assert [p.name for p in rank_files(watch.complete(), 1, "p1")] == ["patchbench-p1-TP-1-PP-0.trace.json.gz"]
    assert rank_files([tmp_path / "x-p1-TP-10.trace.json.gz"], 1, "p1") == []
