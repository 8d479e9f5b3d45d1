"""The miniature upstream (upstream/minisglang): real processes, real HTTP on localhost."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import MINI_PY, mini_env, mini_tu, patched_mini
from contract_probes import sse

from toolkit.run.bench.one_batch import parse_one_batch_jsonl

MINI = MINI_PY.parent
FAST = ["--log-level", "warning", "--mini-step-base-ms", "2", "--mini-step-per-seq-us", "10",
        "--mini-prefill-base-ms", "0.5", "--mini-prefill-per-token-us", "0"]


tu = mini_tu


class Server:
    def __init__(self, tmp_path: Path, args=(), wait=True, name="server"):
        self.port = tu.find_free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / f"{name}-{self.port}.log"
        self.proc = tu.popen_launch_server("/models/mini", self.url, timeout=30,
                                           other_args=list(args), env=mini_env(),
                                           log_path=str(self.log), wait=wait)

    def get(self, path: str):
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return r.status, r.read()

    def get_json(self, path: str):
        return json.loads(self.get(path)[1])

    def post(self, path: str, body: dict):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()

    def stop(self):
        tu.kill_process_tree(self.proc.pid)


@pytest.fixture
def launch(tmp_path):
    servers = []

    def _launch(*args, wait=True):
        s = Server(tmp_path, args, wait=wait)
        servers.append(s)
        return s

    yield _launch
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("mini"),
               ["--tp-size", "8", "--ep-size", "8", "--enable-single-batch-overlap",
                "--moe-runner-backend", "flashinfer_cutlass", "--cuda-graph-max-bs", "64", *FAST])
    yield s
    s.stop()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


# -- server info and health ----------------------------------------------------------------------
def test_server_info_reflects_flags(server):
    for path in ("/server_info", "/get_server_info"):
        info = server.get_json(path)
        assert info["ep_size"] == 8
        assert info["tp_size"] == 8
        assert info["enable_single_batch_overlap"] is True
        assert info["moe_runner_backend"] == "flashinfer_cutlass"
        assert info["cuda_graph_max_bs"] == 64
        assert info["model_path"] == "/models/mini"
        assert info["version"] == "0.0.1+mini"
        assert info["mini_cost_model"]["step_base_s"] == pytest.approx(0.002)
        # sglang 0.5.23's get_internal_state: the arguments again plus scheduler facts, no live counts
        [state] = info["internal_states"]
        assert state["tp_size"] == 8 and state["world_size"] == 8 and "last_gen_throughput" in state
        assert not [k for k in state if k.startswith("#")]


def test_health_and_unknown_routes(server):
    assert server.get("/health")[0] == 200
    assert server.get("/health_generate")[0] == 200
    with pytest.raises(urllib.error.HTTPError) as e:
        server.get("/nope")
    assert e.value.code == 404


def test_generate_stream_contract(server):
    status, raw = server.post("/generate", {
        "text": "one two three four five",
        "sampling_params": {"max_new_tokens": 6, "ignore_eos": True, "temperature": 0},
        "stream": True})
    assert status == 200
    events = sse(raw)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4, 5, 6]
    assert all(c["meta_info"]["prompt_tokens"] == 5 for c in chunks)
    # text is cumulative, one word per token
    assert [len(c["text"].split()) for c in chunks] == [1, 2, 3, 4, 5, 6]
    assert [len(c["output_ids"]) for c in chunks] == [1, 2, 3, 4, 5, 6]  # cumulative, as sglang
    assert chunks[-1]["text"].startswith(chunks[-2]["text"])
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 6}
    assert chunks[-1]["meta_info"]["e2e_latency"] > 0
    # deterministic
    _, raw2 = server.post("/generate", {"text": "one two three four five",
                                        "sampling_params": {"max_new_tokens": 6,
                                                            "ignore_eos": True},
                                        "stream": True})
    assert sse(raw2)[-2]["text"] == chunks[-1]["text"]


def test_generate_non_stream_and_input_ids(server):
    status, raw = server.post("/generate", {"input_ids": list(range(100, 137)),
                                            "sampling_params": {"max_new_tokens": 9,
                                                                "ignore_eos": True}})
    out = json.loads(raw)
    assert status == 200
    assert out["meta_info"]["prompt_tokens"] == 37
    assert out["meta_info"]["completion_tokens"] == 9
    assert len(out["text"].split()) == 9


def test_eos_without_ignore_eos_stops_early(server):
    _, raw = server.post("/generate", {"text": "x " * 10,
                                       "sampling_params": {"max_new_tokens": 500}})
    meta = json.loads(raw)["meta_info"]
    assert meta["finish_reason"]["type"] == "stop"
    assert 1 <= meta["completion_tokens"] <= 97


def test_completions_stream_and_usage(server):
    _, raw = server.post("/v1/completions", {
        "model": "m", "prompt": "a b c", "max_tokens": 4, "stream": True, "ignore_eos": True,
        "stream_options": {"include_usage": True}})
    events = sse(raw)
    assert events[-1] == "[DONE]"
    texts = [e["choices"][0]["text"] for e in events[:-1] if e["choices"]]
    assert len(texts) == 4 and all(len(t.split()) == 1 for t in texts)
    assert events[-2]["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    _, raw = server.post("/v1/completions", {"prompt": "a b c", "max_tokens": 3,
                                             "ignore_eos": True})
    out = json.loads(raw)
    assert out["usage"]["completion_tokens"] == 3
    assert out["choices"][0]["finish_reason"] == "length"


def test_chat_completions_contract(server):
    """OpenAI chat: the messages joined into one prompt, answered by the completions' generation
    path; usage; streaming with the role first, content deltas, a usage chunk, [DONE]."""
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "a b c"}]}]
    _, raw = server.post("/v1/chat/completions", {"model": "m", "messages": messages, "max_tokens": 4,
                                                  "ignore_eos": True, "temperature": 0, "seed": 0})
    out = json.loads(raw)
    assert out["object"] == "chat.completion" and out["choices"][0]["message"]["role"] == "assistant"
    assert out["choices"][0]["finish_reason"] == "length"
    _, raw = server.post("/v1/completions", {"prompt": "system: be brief\nuser: a b c\nassistant:",
                                             "max_tokens": 4, "ignore_eos": True})
    assert out["choices"][0]["message"]["content"] == json.loads(raw)["choices"][0]["text"]
    assert out["usage"] == {"prompt_tokens": 8, "completion_tokens": 4, "total_tokens": 12}
    _, raw = server.post("/v1/chat/completions", {"messages": messages, "max_tokens": 3, "stream": True,
                                                  "ignore_eos": True, "stream_options": {"include_usage": True}})
    events = sse(raw)
    assert events[-1] == "[DONE]" and events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [e["choices"][0]["delta"]["content"] for e in events[1:-1] if e["choices"]]
    assert "".join(deltas) == out["choices"][0]["message"]["content"].rsplit(" ", 1)[0]
    assert events[-2]["usage"]["completion_tokens"] == 3
    with pytest.raises(urllib.error.HTTPError) as e:
        server.post("/v1/chat/completions", {"messages": []})
    assert e.value.code == 400


def test_bad_request_is_400(server):
    with pytest.raises(urllib.error.HTTPError) as e:
        server.post("/generate", {"text": ["batched", "prompts"]})
    assert e.value.code == 400


# -- command line ---------------------------------------------------------------------------------
def test_unknown_flag_exits_2():
    r = subprocess.run([sys.executable, "-m", "sglang.launch_server", "--model-path", "m",
                        "--no-such-flag"], env=mini_env(), capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in r.stderr


def test_server_args_api_and_ep_alias():
    code = (
        "import argparse, json\n"
        "from sglang.srt.server_args import ServerArgs\n"
        "p = argparse.ArgumentParser(); ServerArgs.add_cli_args(p)\n"
        "a = ServerArgs.from_cli_args(p.parse_args(['--model-path', 'm', '--tp-size', '4', "
        "'--ep', '4', '--enable-single-batch-overlap']))\n"
        "b = ServerArgs.from_cli_args(p.parse_args(['--model', 'm', '--tensor-parallel-size', "
        "'2', '--expert-parallel-size', '2']))\n"
        "print(json.dumps([a.tp_size, a.ep_size, a.enable_single_batch_overlap, b.tp_size, "
        "b.ep_size]))\n")
    r = subprocess.run([sys.executable, "-c", code], env=mini_env(), capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [4, 4, True, 2, 2]


# -- readiness, teardown, failure -----------------------------------------------------------------
def test_startup_delay(launch):
    s = launch("--mini-startup-s", "1.0", *FAST, wait=False)
    t0 = time.monotonic()
    seen_503 = False
    while True:
        try:
            if s.get("/health_generate")[0] == 200:
                break
        except urllib.error.HTTPError as e:
            assert e.code == 503
            seen_503 = True
        except (urllib.error.URLError, ConnectionError):
            pass
        assert time.monotonic() - t0 < 20
        time.sleep(0.05)
    assert seen_503
    assert time.monotonic() - t0 >= 0.9


def test_sigterm_stops_server_and_child(launch):
    s = launch(*FAST)
    child = s.get_json("/server_info")["mini_child_pids"][0]
    assert alive(child)
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=10) == 0
    assert wait_gone(child)


def test_sigkill_alone_leaves_child_group_teardown_removes_it(launch):
    s = launch(*FAST)
    child = s.get_json("/server_info")["mini_child_pids"][0]
    pgid = os.getpgid(s.proc.pid)
    assert os.getpgid(child) == pgid
    s.proc.kill()
    s.proc.wait(timeout=10)
    time.sleep(0.3)
    assert alive(child), "the child should outlive a SIGKILLed parent"
    os.killpg(pgid, signal.SIGTERM)
    assert wait_gone(child)


def test_crash_after_n_requests(launch):
    s = launch("--mini-crash-after-requests", "2", *FAST)
    body = {"text": "a b", "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}}
    assert s.post("/generate", body)[0] == 200
    assert s.post("/generate", body)[0] == 200
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        s.post("/generate", body)
    assert s.proc.wait(timeout=10) != 0
    log = s.log.read_text()
    assert "CUDA error: an illegal memory access was encountered" in log


# -- bench_one_batch -------------------------------------------------------------------------------
def run_one_batch(tmp_path: Path, pythonpath: Path = MINI_PY, extra=()) -> Path:
    out = tmp_path / "one_batch.jsonl"
    r = subprocess.run([sys.executable, "-m", "sglang.bench_one_batch", "--model-path", "m",
                        "--batch-size", "1", "2", "4", "--input-len", "16", "--output-len", "8",
                        "--result-filename", str(out), "--run-name", "t", *extra],
                       env=mini_env(pythonpath), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return out


def test_bench_one_batch_jsonl(tmp_path):
    # steps of 50+ ms: a busy host (parallel tests, a load of 10 on 2 cores) wakes a sleeper up to
    # ~7 ms late, within the 15 %
    out = run_one_batch(tmp_path, extra=["--mini-step-base-ms", "50", "--mini-step-per-seq-us",
                                         "5000"])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["batch_size"] for r in rows] == [1, 2, 4]
    for r in rows:
        assert r["run_name"] == "t" and r["input_len"] == 16 and r["output_len"] == 8
        for k in ("prefill_latency", "prefill_throughput", "median_decode_latency",
                  "median_decode_throughput", "total_latency", "overall_throughput"):
            assert r[k] > 0
        planned = 0.050 + 0.005 * r["batch_size"]
        assert r["median_decode_latency"] == pytest.approx(planned, rel=0.15)
    samples = parse_one_batch_jsonl(out)
    by = {(s.metric, s.point): s for s in samples}
    assert by[("decode_tok_s", 4)].value == pytest.approx(rows[2]["median_decode_throughput"])
    assert by[("decode_step_ms_median", 1)].unit == "ms"
    assert all(s.point_kind == "batch" for s in samples)


def test_patched_cost_constant_changes_speed(tmp_path):
    """A patch to cost.py (not a flag) changes the measured decode speed."""
    # 6x less per step: more than 2x faster even when a busy host adds a few ms to every step
    patched = patched_mini(tmp_path / "patched", "STEP_BASE_S = 0.012\n", "STEP_BASE_S = 0.002\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    base = parse_one_batch_jsonl(run_one_batch(tmp_path / "a"))
    fast = parse_one_batch_jsonl(run_one_batch(tmp_path / "b", pythonpath=patched))
    tok = lambda samples, b: next(s.value for s in samples  # noqa: E731
                                  if s.metric == "decode_tok_s" and s.point == b)
    for b in (1, 2, 4):
        assert tok(fast, b) > 2 * tok(base, b)


# -- packaging and CUDA sources --------------------------------------------------------------------
def test_pyproject_installs_offline(tmp_path):
    from uv import find_uv_bin

    uv = Path(find_uv_bin())
    src = tmp_path / "src"
    shutil.copytree(MINI_PY, src, ignore=shutil.ignore_patterns("__pycache__", "build",
                                                                "*.egg-info"))
    venv = tmp_path / "venv"
    subprocess.run([str(uv), "venv", "-q", "-p", sys.executable, str(venv)], check=True,
                   timeout=60)
    r = subprocess.run([str(uv), "pip", "install", "-q", "--offline", "--no-deps", "-p",
                        str(venv / "bin" / "python"), str(src)], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0 and "offline" in r.stderr.lower():
        pytest.skip(f"setuptools not in uv's cache: {r.stderr.strip()[:200]}")
    assert r.returncode == 0, r.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import sglang, importlib.metadata as m; "
                          "print(sglang.__version__, m.version('sglang'), "
                          "m.requires('sglang'))"],
                         capture_output=True, text=True, env=env, timeout=30)
    assert out.stdout.split() == ["0.0.1+mini", "0.0.1+mini", "None"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
@pytest.mark.parametrize("name", ["decode_step", "topk"])
def test_cuda_sources_compile_for_sm120a(tmp_path, name):
    out = tmp_path / f"{name}.cubin"
    r = subprocess.run(["nvcc", "-gencode", "arch=compute_120a,code=sm_120a", "-cubin", "-o",
                        str(out), str(MINI / "csrc" / f"{name}.cu")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 0
