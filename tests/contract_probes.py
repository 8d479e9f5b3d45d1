"""What patchbench relies on from an sglang server, as probes: one function per route or behaviour,
each taking the server's base URL (and, for profiling, a directory the server can write), raising
AssertionError with what differed. tests/test_server_contract.py runs every probe against each
server it knows (the miniature; real sglang 0.5.23 on CPU where that fixture is available), so where
the miniature and real sglang differ, the test fails.

The facts probed are those patchbench's code reads: toolkit/run/server.py (health, /server_info),
toolkit/run/bench/serving.py (streaming /generate and /v1/completions, the token counts it checks),
toolkit/run/quality.py (non-streamed /generate with logprobs), toolkit/profile/capture.py
(/start_profile, /stop_profile, the trace files), toolkit/run/bench/server_account.py (/metrics). Only the standard library is used, so a probe runs
in any interpreter."""

from __future__ import annotations

import gzip
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

PROMPT_IDS = list(range(100, 116))  # 16 token ids: valid for any vocabulary above a few hundred
NEW_TOKENS = 8
# /server_info keys patchbench reads (verification, the serving client, the profile's rank count).
SERVER_INFO_KEYS = ("version", "model_path", "served_model_name", "tp_size", "ep_size", "dp_size", "pp_size",
                    "attn_dp_size", "enable_dp_attention", "chunked_prefill_size",
                    "attention_backend", "max_running_requests", "context_length", "internal_states")
# internal_states[0] keys both sglang 0.5.23 and the miniature have.
INTERNAL_STATE_KEYS = ("last_gen_throughput", "world_size", "startup_time", "effective_max_running_requests_per_dp")


# -- HTTP ------------------------------------------------------------------------------------------
def get(base: str, path: str, timeout: float = 30) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(base + path, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def post(base: str, path: str, body: dict | None, timeout: float = 60) -> tuple[int, bytes]:
    req = urllib.request.Request(base + path, data=json.dumps(body or {}).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def sse(raw: bytes) -> list:
    """The `data:` payloads of an SSE body, JSON-decoded ("[DONE]" kept as the string)."""
    out = []
    for block in raw.decode().replace("\r\n", "\n").split("\n\n"):
        block = block.strip()
        if block.startswith("data:"):
            data = block[5:].strip()
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def server_info(base: str) -> dict:
    code, raw = get(base, "/server_info")
    assert code == 200, f"/server_info answered {code}"
    return json.loads(raw)


# -- probes ----------------------------------------------------------------------------------------
def health(base: str) -> None:
    """/health and /health_generate answer 200 once the server is ready (server.wait_ready)."""
    for path in ("/health", "/health_generate"):
        code, _ = get(base, path)
        assert code == 200, f"{path} answered {code}"


def server_info_keys(base: str) -> None:
    """/server_info and its old alias /get_server_info: a flat dict with the keys patchbench reads."""
    info = server_info(base)
    code, raw = get(base, "/get_server_info")
    assert code == 200, f"/get_server_info answered {code}"
    assert set(json.loads(raw)) >= set(SERVER_INFO_KEYS)
    missing = [k for k in SERVER_INFO_KEYS if k not in info]
    assert not missing, f"/server_info lacks {missing}"
    assert isinstance(info["version"], str) and info["version"]
    for k in ("tp_size", "ep_size", "dp_size", "pp_size", "attn_dp_size"):
        assert isinstance(info[k], int) and info[k] >= 1, (k, info[k])
    # 0.5.23 reports the deprecated flag as "attention DP runs" (resolved_dict), not as given
    assert info["enable_dp_attention"] is (info["attn_dp_size"] > 1), (info["enable_dp_attention"], info["attn_dp_size"])
    assert isinstance(info["served_model_name"], str) and info["served_model_name"]


def internal_states(base: str) -> None:
    """internal_states: a list of dicts (one per DP rank) with sglang 0.5.23's keys, and no
    running-request count (0.5.23's get_internal_state has none; patchbench must not need one)."""
    states = server_info(base)["internal_states"]
    assert isinstance(states, list) and states and all(isinstance(s, dict) for s in states), states
    missing = [k for k in INTERNAL_STATE_KEYS if k not in states[0]]
    assert not missing, f"internal_states[0] lacks {missing}"
    assert not [k for k in states[0] if k.startswith("#")], f"keys sglang does not have: {list(states[0])}"


def models(base: str) -> None:
    code, raw = get(base, "/v1/models")
    assert code == 200, f"/v1/models answered {code}"
    data = json.loads(raw)["data"]
    assert data and data[0]["id"]


def _generate_body(stream: bool, **extra) -> dict:
    return {"input_ids": PROMPT_IDS, "stream": stream, **extra,
            "sampling_params": {"max_new_tokens": NEW_TOKENS, "temperature": 0.0, "ignore_eos": True}}


def generate_stream(base: str) -> None:
    """Streaming /generate: `data: {...}` events with the cumulative text and output_ids, a cumulative
    meta_info.completion_tokens, prompt_tokens, finish_reason {type: length} on the last, then [DONE]."""
    code, raw = post(base, "/generate", _generate_body(True))
    assert code == 200, f"/generate answered {code}: {raw[:200]!r}"
    events = sse(raw)
    assert events and events[-1] == "[DONE]" and "[DONE]" not in events[:-1], events[-3:]
    chunks = events[:-1]
    assert chunks, "no data events"
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:])), f"text is not cumulative: {texts}"
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] == NEW_TOKENS, counts
    ids = [c.get("output_ids") for c in chunks]
    assert all(isinstance(i, list) for i in ids), "output_ids missing from the stream"
    assert all(b[:len(a)] == a for a, b in zip(ids, ids[1:])) and len(ids[-1]) == NEW_TOKENS, ids
    last = chunks[-1]["meta_info"]
    assert last["prompt_tokens"] == len(PROMPT_IDS), last
    assert last["finish_reason"]["type"] == "length", last
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])


def _metric_sums(base: str) -> dict:
    """/metrics' samples summed over label sets, by sample name (and `name|mode` for the CUDA graph
    passes): the Prometheus text format read with the standard library."""
    code, raw = get(base, "/metrics")
    assert code == 200, f"/metrics answered {code} (the servers here are launched with --enable-metrics)"
    out: dict = {}
    for line in raw.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name = head.split("{", 1)[0]
        if name == "sglang:cuda_graph_passes_total":
            name += "|" + head.split('mode="', 1)[1].split('"', 1)[0]
        out[name] = out.get(name, 0.0) + float(value)
    return out


def metrics_account(base: str) -> None:
    """/metrics (toolkit/run/bench/server_account.py): one streamed request moves the finished-requests,
    prompt and generation token counters by exactly its own counts (within 2 s of its last chunk),
    the inter-token latency histogram by one token fewer than it generated, and the decode passes
    (with or without a CUDA graph) by at least that many; the counter names patchbench reads."""
    before = _metric_sums(base)
    code, raw = post(base, "/generate", _generate_body(True))
    assert code == 200 and sse(raw)[-1] == "[DONE]", raw[-200:]
    deadline = time.time() + 2.0
    while True:
        after = _metric_sums(base)
        moved = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        if moved.get("sglang:num_requests_total", 0) >= 1 or time.time() > deadline:
            break
        time.sleep(0.02)
    assert moved.get("sglang:num_requests_total") == 1, moved
    assert moved.get("sglang:prompt_tokens_total") == len(PROMPT_IDS), moved
    assert moved.get("sglang:generation_tokens_total") == NEW_TOKENS, moved
    assert moved.get("sglang:inter_token_latency_seconds_count") == NEW_TOKENS - 1, moved
    assert moved.get("sglang:inter_token_latency_seconds_sum", 0) > 0, moved
    passes = moved.get("sglang:cuda_graph_passes_total|decode_cuda_graph", 0) + \
        moved.get("sglang:cuda_graph_passes_total|decode_none", 0)
    assert passes >= NEW_TOKENS - 1, moved
    for name in ("sglang:num_aborted_requests_total", "sglang:cached_tokens_total",
                 "sglang:num_retracted_requests_total"):
        assert after.get(name, 0) >= 0
    # a client that accepts gzip (aiohttp's default) gets it: the account asks for identity
    req = urllib.request.Request(base + "/metrics", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.headers.get("Content-Encoding") == "gzip", dict(resp.headers)
        assert b"sglang:num_requests_total" in gzip.decompress(resp.read())


def generate_logprobs(base: str) -> None:
    """Non-streamed /generate with return_logprob: text, output_ids and meta_info's
    output_token_logprobs rows [logprob, token id, ...] matching the ids (toolkit/run/quality.py)."""
    code, raw = post(base, "/generate", _generate_body(False, return_logprob=True))
    assert code == 200, f"/generate answered {code}: {raw[:200]!r}"
    data = json.loads(raw)
    meta = data["meta_info"]
    assert isinstance(data["text"], str) and len(data["output_ids"]) == NEW_TOKENS, data
    assert meta["completion_tokens"] == NEW_TOKENS and meta["prompt_tokens"] == len(PROMPT_IDS), meta
    rows = meta["output_token_logprobs"]
    assert [r[1] for r in rows] == data["output_ids"], rows
    assert all(isinstance(r[0], float) and r[0] <= 0.0 for r in rows), rows


def completions_stream(base: str) -> None:
    """Streaming /v1/completions with stream_options.include_usage: delta text chunks, then a
    choices-less chunk whose usage counts the tokens, then [DONE] (the serving client's `completions`)."""
    model = server_info(base)["served_model_name"]
    code, raw = post(base, "/v1/completions", {
        "model": model, "prompt": PROMPT_IDS, "max_tokens": NEW_TOKENS, "temperature": 0.0, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True}})
    assert code == 200, f"/v1/completions answered {code}: {raw[:200]!r}"
    events = sse(raw)
    assert events and events[-1] == "[DONE]", events[-2:]
    chunks = events[:-1]
    usage = [c["usage"] for c in chunks if c.get("usage") and not c.get("choices")]
    assert usage, "no usage chunk"
    assert usage[-1]["completion_tokens"] == NEW_TOKENS and usage[-1]["prompt_tokens"] == len(PROMPT_IDS), usage
    texts = [c["choices"][0]["text"] for c in chunks if c.get("choices")]
    assert any(texts), "no text chunk"
    assert [c["choices"][0].get("finish_reason") for c in chunks if c.get("choices")][-1] == "length"


# -- profiling -------------------------------------------------------------------------------------
class Load:
    """`n` streaming /generate requests of `tokens` tokens in background threads, each sent again
    as soon as it ends, until the block exits: real sglang writes a `num_steps` trace only when a
    later forward step begins, so the server must keep stepping (an idle server never writes it).
    `decoding` is set once every thread's first request has received a chunk."""

    def __init__(self, base: str, n: int = 2, tokens: int = 256):
        self.base, self.n, self.tokens = base, n, tokens
        self.seen = 0
        self.lock = threading.Lock()
        self.decoding = threading.Event()
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(n)]

    def _loop(self) -> None:
        first = True
        while not self.done.is_set():
            self._one(first)
            first = False

    def _one(self, count: bool) -> None:
        body = {"input_ids": PROMPT_IDS, "stream": True,
                "sampling_params": {"max_new_tokens": self.tokens, "temperature": 0.0, "ignore_eos": True}}
        req = urllib.request.Request(self.base + "/generate", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as resp:
            while resp.read1(1 << 16):
                if count:
                    count = False
                    with self.lock:
                        self.seen += 1
                        if self.seen == self.n:
                            self.decoding.set()

    def __enter__(self) -> "Load":
        for t in self.threads:
            t.start()
        assert self.decoding.wait(120), "the load's requests never started decoding"
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        for t in self.threads:
            t.join(300)


def trace_files(out_dir: Path, profile_id: str) -> list[Path]:
    return sorted(p for p in out_dir.glob(f"*{profile_id}-TP-*.trace.json.gz"))


def wait_complete_trace(out_dir: Path, profile_id: str, timeout: float = 120) -> list[Path]:
    """The trace files once every one reads to its gzip end (polled)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = trace_files(out_dir, profile_id)
        try:
            if files:
                for f in files:
                    with gzip.open(f, "rt") as fh:
                        json.load(fh)
                return files
        except (OSError, EOFError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"no complete trace *{profile_id}-TP-*.trace.json.gz under {out_dir} after {timeout} s")


def start_profile_num_steps(base: str, out_dir: Path) -> None:
    """With num_steps: /start_profile answers 200 at once, before any trace exists; the server then
    stops by itself and writes `<id>-TP-0.trace.json.gz`; a later /stop_profile answers 500
    (profiling is no longer in progress)."""
    pid = f"contract-auto-{time.time_ns()}"
    with Load(base):
        t0 = time.monotonic()
        code, raw = post(base, "/start_profile", {"output_dir": str(out_dir), "num_steps": 10, "activities": ["CPU"],
                                                  "profile_id": pid})
        answered = time.monotonic() - t0
        assert code == 200, f"/start_profile answered {code}: {raw[:300]!r}"
        assert not trace_files(out_dir, pid), (
            f"/start_profile answered after the trace was written ({answered:.2f} s): it must answer at once")
        files = wait_complete_trace(out_dir, pid)
    assert any(f.name.endswith(f"{pid}-TP-0.trace.json.gz") for f in files), files
    code, raw = post(base, "/stop_profile", None)
    assert code == 500, f"/stop_profile after the auto-stop answered {code}: {raw[:200]!r}"


def start_profile_manual(base: str, out_dir: Path) -> None:
    """Without num_steps: recording lasts until /stop_profile (200), which writes the trace; a
    /stop_profile when none is in progress answers 500. (A second /start_profile while one runs is
    not probed: real sglang 0.5.23 on CPU answered it 200, and patchbench never sends one.)"""
    pid = f"contract-manual-{time.time_ns()}"
    body = {"output_dir": str(out_dir), "activities": ["CPU"], "profile_id": pid}
    with Load(base):
        code, raw = post(base, "/start_profile", body)
        assert code == 200, f"/start_profile answered {code}: {raw[:300]!r}"
        time.sleep(0.5)  # let some forward steps be recorded
        code, raw = post(base, "/stop_profile", None)
        assert code == 200, f"/stop_profile answered {code}: {raw[:300]!r}"
        wait_complete_trace(out_dir, pid)
    code, _ = post(base, "/stop_profile", None)
    assert code == 500, f"/stop_profile with nothing in progress answered {code}"


# Every probe, by name: a server fixture runs them all. `needs_dir` probes take (base, out_dir).
PROBES = {f.__name__: f for f in (health, server_info_keys, internal_states, models, generate_stream,
                                  generate_logprobs, completions_stream, metrics_account)}
PROFILE_PROBES = {f.__name__: f for f in (start_profile_num_steps, start_profile_manual)}
