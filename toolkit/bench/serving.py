"""patchbench's asynchronous streaming client: the standard decode benchmark.

A sweep over concurrency points against a running sglang server (or the miniature). At each
point, `num_prompts` requests with exactly `input_len` prompt tokens and `output_len` generated
tokens (`ignore_eos`) run closed-loop with at most `concurrency` in flight, after `warmup`
requests that are excluded (and after opening `concurrency` keep-alive connections, so no
measured request pays for connecting). Per request: TTFT, the inter-token latencies (ITL), TPOT
and end-to-end latency; per point: token and request throughput (over the span from the first
request sent to the last response finished) and mean/median/p99 (plus p95/max for ITL) of those.

Token counts are cross-checked with the server: the final `meta_info.completion_tokens`
(`/generate`) or `usage.completion_tokens` (`/v1/completions`) must equal `output_len`, and the
reported prompt tokens must equal `input_len`. A mismatch makes the request fail, with the reason
in `PointResult.errors`. Failed requests are left out of the metrics and counted in `failed`; the
sweep stops after a point where no request succeeded. Warmup requests (output capped at 32 tokens)
run before each point at min(warmup, concurrency) in flight; their failures are listed as
"warmup: ..." errors.

Prompts are deterministic from `seed`, the point's concurrency and the request index (random, so
requests practically share no prefix and a radix cache cannot make later points look faster):
  * "input_ids": random token ids in [1000, vocab_size - 1000): exact length on any server;
  * "text": random words, exactly `input_len` tokens for the miniature's whitespace tokenizer;
  * "auto" (default): "text" if /server_info says the server is the miniature, else "input_ids".

Timing: time.perf_counter() around each request; every read from the socket is timestamped once,
and SSE events that arrive in one read share that timestamp. When one event carries k > 1 new
tokens, its interval is split evenly over the k tokens, as sglang's bench_serving does.

    results = run_serving("http://127.0.0.1:30000", ServingConfig(input_len=128, output_len=64,
                                                                  concurrency=(1, 4)))
    samples = [s for p in results for s in p.to_samples()]
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from toolkit.bench import Sample
from toolkit.errors import BadInput

DEFAULT_CONCURRENCY: tuple[int, ...] = tuple(2**i for i in range(11))  # 1, 2, 4, ..., 1024
ENDPOINTS = {"generate": "/generate", "completions": "/v1/completions"}
PROMPT_KINDS = ("auto", "text", "input_ids")
WARMUP_MAX_OUTPUT = 32
MAX_ERROR_KINDS = 30

# progress(phase, concurrency, done, total); phase is "warmup" or "measure".
Progress = Callable[[str, int, int, int], None]


def default_num_prompts(concurrency: int) -> int:
    """Requests per point when ServingConfig.num_prompts is None: four waves, at least 8."""
    return max(4 * concurrency, 8)


@dataclass(frozen=True)
class ServingConfig:
    input_len: int = 1024
    output_len: int = 128
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    num_prompts: Optional[int] = None  # per point; None -> default_num_prompts(concurrency)
    warmup: int = 2  # per point, excluded; run at min(warmup, concurrency) in flight
    seed: int = 1
    endpoint: str = "generate"  # "generate" (sglang native) | "completions" (OpenAI)
    timeout_s: float = 600.0  # per request
    prompt: str = "auto"  # "auto" | "text" | "input_ids"
    stream: bool = True
    model: Optional[str] = None  # "model" for /v1/completions; None -> the server's served name
    vocab_size: int = 32000  # random input ids are drawn from [1000, vocab_size - 1000)
    send_rid: bool = False  # send "rid": "pb-<seed>-<concurrency>-<m|w><index>" (/generate only)

    def __post_init__(self) -> None:
        if self.input_len < 1 or self.output_len < 1:
            raise BadInput("input_len and output_len must be >= 1")
        if not self.concurrency or any(int(c) < 1 for c in self.concurrency):
            raise BadInput(
                f"concurrency must be a non-empty list of ints >= 1: {self.concurrency!r}")
        object.__setattr__(self, "concurrency", tuple(int(c) for c in self.concurrency))
        if self.num_prompts is not None and self.num_prompts < 1:
            raise BadInput("num_prompts must be >= 1")
        if self.warmup < 0:
            raise BadInput("warmup must be >= 0")
        if self.endpoint not in ENDPOINTS:
            raise BadInput(f"endpoint must be one of {sorted(ENDPOINTS)}, not {self.endpoint!r}")
        if self.prompt not in PROMPT_KINDS:
            raise BadInput(f"prompt must be one of {PROMPT_KINDS}, not {self.prompt!r}")
        if self.vocab_size < 3000:
            raise BadInput("vocab_size must be >= 3000")

    def requests_at(self, concurrency: int) -> int:
        if self.num_prompts is not None:
            return self.num_prompts
        return default_num_prompts(concurrency)

    def to_dict(self) -> dict:
        return {
            "input_len": self.input_len, "output_len": self.output_len,
            "concurrency": list(self.concurrency), "num_prompts": self.num_prompts,
            "warmup": self.warmup, "seed": self.seed, "endpoint": self.endpoint,
            "timeout_s": self.timeout_s, "prompt": self.prompt, "stream": self.stream,
            "model": self.model, "vocab_size": self.vocab_size, "send_rid": self.send_rid,
        }


UNITS = {
    "output_tok_s": "tok/s", "input_tok_s": "tok/s", "total_tok_s": "tok/s", "request_s": "req/s",
    "completed": "count", "failed": "count", "duration_s": "s", "concurrency_achieved": "requests",
}


def unit_of(metric: str) -> str:
    if metric in UNITS:
        return UNITS[metric]
    if "_ms_" in metric or metric.endswith("_ms"):
        return "ms"
    return ""


@dataclass
class RequestResult:
    """One request as the client saw it (times in seconds)."""

    ok: bool
    start: float = 0.0  # time.perf_counter() when the request was sent
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft: float = 0.0
    e2e: float = 0.0
    itl: list = field(default_factory=list)
    error: str = ""


@dataclass
class PointResult:
    concurrency: int
    requests: int  # measured requests issued at this point (warmup excluded)
    metrics: dict = field(default_factory=dict)  # name -> value (see toolkit.bench)
    units: dict = field(default_factory=dict)  # name -> unit
    errors: list = field(default_factory=list)  # "N x reason", most frequent first

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_samples(self) -> list[Sample]:
        return [Sample(m, float(v), self.units.get(m, unit_of(m)), self.concurrency, "concurrency")
                for m, v in self.metrics.items()
                if v is not None and not (isinstance(v, float) and math.isnan(v))]

    def to_dict(self) -> dict:
        return {"concurrency": self.concurrency, "requests": self.requests,
                "metrics": dict(self.metrics), "units": dict(self.units),
                "errors": list(self.errors)}


# ---------------------------------------------------------------------------------------------
# Pure parts: prompts, payloads, statistics
# ---------------------------------------------------------------------------------------------
_SYL = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "den", "pra", "gul", "fen", "tor", "bix")


def _rng(seed: int, concurrency: int, index: int, tag: str) -> random.Random:
    return random.Random(f"patchbench:{seed}:{concurrency}:{tag}:{index}")


def make_prompt(kind: str, cfg: ServingConfig, concurrency: int, index: int, tag: str = "m"):
    """The deterministic prompt of request `index` at a point: a str ("text") or list of ids."""
    rng = _rng(cfg.seed, concurrency, index, tag)
    if kind == "input_ids":
        lo, hi = 1000, cfg.vocab_size - 1000
        return [rng.randrange(lo, hi) for _ in range(cfg.input_len)]
    if kind == "text":
        return " ".join(rng.choice(_SYL) + rng.choice(_SYL) + str(rng.randrange(100))
                        for _ in range(cfg.input_len))
    raise BadInput(f"prompt kind must be 'text' or 'input_ids', not {kind!r}")


def build_payload(cfg: ServingConfig, prompt, output_len: int, model: str,
                  rid: Optional[str] = None) -> bytes:
    """The JSON body for one request (sglang's /generate or OpenAI /v1/completions)."""
    if cfg.endpoint == "generate":
        body = {
            ("text" if isinstance(prompt, str) else "input_ids"): prompt,
            "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True,
                                "temperature": 0.0},
            "stream": cfg.stream,
        }
        if rid is not None:
            body["rid"] = rid
    else:
        body = {"model": model, "prompt": prompt, "max_tokens": output_len,
                "temperature": 0.0, "ignore_eos": True, "stream": cfg.stream}
        if cfg.stream:
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    return json.dumps(body, separators=(",", ":")).encode()


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default) of already sorted values."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _stats(prefix: str, values_s: list, quantiles: Iterable[str]) -> dict:
    out = {}
    if not values_s:
        return out
    v = sorted(x * 1e3 for x in values_s)
    n = len(v)
    mean = sum(v) / n
    out[f"{prefix}_mean"] = mean
    out[f"{prefix}_median"] = percentile(v, 50)
    for q in quantiles:
        if q == "max":
            out[f"{prefix}_max"] = v[-1]
        else:
            out[f"{prefix}_{q}"] = percentile(v, float(q[1:]))
    out[f"{prefix}_std"] = math.sqrt(sum((x - mean) ** 2 for x in v) / n)
    return out


def summarize(concurrency: int, results: Sequence[RequestResult], duration_s: float,
              extra_errors: Sequence[str] = ()) -> PointResult:
    """Per-point metrics from per-request results (pure)."""
    good = [r for r in results if r.ok]
    failed = len(results) - len(good)
    m: dict = {"completed": float(len(good)), "failed": float(failed), "duration_s": duration_s}
    if good and duration_s > 0:
        out_tokens = sum(r.completion_tokens for r in good)
        in_tokens = sum(r.prompt_tokens for r in good)
        m["output_tok_s"] = out_tokens / duration_s
        m["input_tok_s"] = in_tokens / duration_s
        m["request_s"] = len(good) / duration_s
        m["concurrency_achieved"] = sum(r.e2e for r in good) / duration_s
        m.update(_stats("ttft_ms", [r.ttft for r in good], ("p99",)))
        m.update(_stats("itl_ms", [x for r in good for x in r.itl], ("p95", "p99", "max")))
        tpots = [(r.e2e - r.ttft) / (r.completion_tokens - 1) for r in good
                 if r.completion_tokens > 1]
        m.update(_stats("tpot_ms", tpots, ("p99",)))
        m.update(_stats("e2e_ms", [r.e2e for r in good], ("p99",)))
    counts: dict = {}
    for r in results:
        if not r.ok:
            counts[r.error] = counts.get(r.error, 0) + 1
    for e in extra_errors:
        counts[e] = counts.get(e, 0) + 1
    errors = [f"{n} x {e}" for e, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    if len(errors) > MAX_ERROR_KINDS:
        errors = errors[:MAX_ERROR_KINDS] + [f"... and {len(errors) - MAX_ERROR_KINDS} more kinds"]
    return PointResult(concurrency, len(results), m, {k: unit_of(k) for k in m}, errors)


# ---------------------------------------------------------------------------------------------
# The client
# ---------------------------------------------------------------------------------------------
def _short(text: str, n: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _int_field(ev: bytes, key: bytes) -> Optional[int]:
    """The integer value of JSON member `key` (b'"name"') in a JSON object's bytes, or None.

    A match counts only when the key is preceded by '{' or ',' (after whitespace): inside a JSON
    string every '"' is escaped, so a generated text cannot fake it. Takes the last such member.
    """
    i = ev.rfind(key)
    while i > 0:
        j = i - 1
        while j >= 0 and ev[j] in b" \t\r\n":
            j -= 1
        if j >= 0 and ev[j] in b",{":
            k = i + len(key)
            n = len(ev)
            while k < n and ev[k] in b" \t\r\n":
                k += 1
            if k < n and ev[k] == 58:  # ':'
                k += 1
                while k < n and ev[k] in b" \t\r\n":
                    k += 1
                e = k
                while e < n and 48 <= ev[e] <= 57:
                    e += 1
                if e > k:
                    return int(ev[k:e])
            return None
        i = ev.rfind(key, 0, i)
    return None


async def _request(session, url: str, payload: bytes, cfg: ServingConfig, input_len: int,
                   output_len: int, timeout) -> RequestResult:
    """Send one request and time it. Never raises (errors are returned)."""
    import aiohttp

    generate = cfg.endpoint == "generate"
    t0 = time.perf_counter()
    res = RequestResult(ok=False, start=t0)
    try:
        async with session.post(url, data=payload, timeout=timeout,
                                headers={"Content-Type": "application/json"}) as resp:
            if resp.status != 200:
                body = await resp.text()
                res.error = f"HTTP {resp.status}: {_short(body)}"
                return res
            n = 0  # tokens seen so far (server's count)
            prompt_tokens = None
            if not cfg.stream:
                data = json.loads(await resp.read())
                t = time.perf_counter()
                if generate:
                    meta = data.get("meta_info") or {}
                    n, prompt_tokens = meta.get("completion_tokens"), meta.get("prompt_tokens")
                else:
                    usage = data.get("usage") or {}
                    n, prompt_tokens = usage.get("completion_tokens"), usage.get("prompt_tokens")
                res.ttft = res.e2e = t - t0
            else:
                itl = res.itl
                buf = b""
                last_t = 0.0
                first = True
                done = False
                last_ev = None
                async for data in resp.content.iter_any():
                    t = time.perf_counter()
                    if b"\r" in data:  # SSE allows CRLF line ends
                        data = data.replace(b"\r\n", b"\n")
                    buf += data
                    if b"\n\n" not in buf:
                        continue
                    *events, buf = buf.split(b"\n\n")
                    for ev in events:
                        ev = ev.strip()
                        if not ev.startswith(b"data:"):
                            continue
                        ev = ev[5:].strip()
                        if ev == b"[DONE]":
                            done = True
                            continue
                        if generate:
                            # Tokens are counted by meta_info.completion_tokens (cumulative),
                            # read without decoding the whole chunk (its "text" is cumulative).
                            new_n = _int_field(ev, b'"completion_tokens"')
                            if new_n is None:
                                obj = json.loads(ev)
                                if "error" in obj:
                                    res.error = f"server error in stream: {_short(obj['error'])}"
                                    res.e2e = time.perf_counter() - t0
                                    return res
                                new_n = obj["meta_info"]["completion_tokens"]
                            last_ev = ev
                        else:
                            obj = json.loads(ev)
                            if "error" in obj:
                                res.error = f"server error in stream: {_short(obj['error'])}"
                                res.e2e = time.perf_counter() - t0
                                return res
                            usage = obj.get("usage")
                            if usage:
                                prompt_tokens = usage.get("prompt_tokens", prompt_tokens)
                            choices = obj.get("choices") or ()
                            if not choices or not choices[0].get("text"):
                                if usage and usage.get("completion_tokens") is not None:
                                    n = usage["completion_tokens"]
                                continue
                            if usage and usage.get("completion_tokens") is not None:
                                new_n = usage["completion_tokens"]
                            else:
                                new_n = n + 1
                        k = new_n - n
                        if k <= 0:
                            continue
                        if first:
                            res.ttft = t - t0
                            first = False
                        else:
                            dt = (t - last_t) / k
                            if k == 1:
                                itl.append(dt)
                            else:
                                itl.extend([dt] * k)
                        last_t = t
                        n = new_n
                res.e2e = time.perf_counter() - t0
                if generate and last_ev is not None:
                    prompt_tokens = _int_field(last_ev, b'"prompt_tokens"')
                    if prompt_tokens is None:
                        prompt_tokens = json.loads(last_ev)["meta_info"].get("prompt_tokens")
                if not done:
                    res.error = "stream ended without data: [DONE]"
                    return res
                if first:
                    res.error = "stream carried no tokens"
                    return res
            res.completion_tokens = int(n or 0)
            res.prompt_tokens = int(prompt_tokens) if prompt_tokens is not None else input_len
            if n is None:
                res.error = "the server reported no completion token count"
            elif n != output_len:
                res.error = (f"token count mismatch: server reported completion_tokens={n}, "
                             f"requested output_len={output_len}")
            elif prompt_tokens is not None and prompt_tokens != input_len:
                res.error = (f"prompt length mismatch: server reported prompt_tokens="
                             f"{prompt_tokens}, requested input_len={input_len}")
            else:
                res.ok = True
            return res
    except asyncio.TimeoutError:
        res.error = f"timeout after {cfg.timeout_s:g} s"
    except aiohttp.ClientError as e:
        res.error = f"{type(e).__name__}: {_short(e)}"
    except (ValueError, KeyError, TypeError) as e:
        res.error = f"bad response: {type(e).__name__}: {_short(e)}"
    except OSError as e:
        res.error = f"{type(e).__name__}: {_short(e)}"
    res.e2e = time.perf_counter() - t0
    return res


async def _closed_loop(session, url: str, payloads: list, cfg: ServingConfig, concurrency: int,
                       output_len: int, timeout, phase: str,
                       progress: Optional[Progress]) -> tuple[list, float]:
    """Run `payloads` with at most `concurrency` in flight; return (results, duration_s)."""
    results: list = [None] * len(payloads)
    next_index = 0
    done = 0
    total = len(payloads)

    async def worker() -> None:
        nonlocal next_index, done
        while next_index < total:
            i = next_index
            next_index += 1
            results[i] = await _request(session, url, payloads[i], cfg, cfg.input_len,
                                        output_len, timeout)
            done += 1
            if progress is not None:
                progress(phase, concurrency, done, total)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, total))))
    t1 = time.perf_counter()
    # The point spans from the first request sent to the last response finished.
    started = [r.start for r in results if r is not None and r.start]
    ended = [r.start + r.e2e for r in results if r is not None and r.start]
    if started:
        return results, max(ended) - min(started)
    return results, t1 - t0


async def open_connections(session, base_url: str, n: int) -> int:
    """Open `n` keep-alive connections (n concurrent GET /v1/models) so that a point's first
    requests do not pay for connecting; returns how many answered."""
    import aiohttp

    async def one() -> bool:
        try:
            async with session.get(base_url + "/v1/models",
                                   timeout=aiohttp.ClientTimeout(total=30)) as resp:
                await resp.read()
                return True
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return False

    return sum(await asyncio.gather(*(one() for _ in range(n))))


async def probe_server(session, base_url: str) -> dict:
    """GET /server_info (or /get_server_info); {} when neither answers."""
    import aiohttp

    for path in ("/server_info", "/get_server_info"):
        try:
            async with session.get(base_url + path,
                                   timeout=aiohttp.ClientTimeout(total=30)) as resp:
                if resp.status == 200:
                    info = await resp.json(content_type=None)
                    if isinstance(info, dict):
                        return info
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            pass
    return {}


def _rid(cfg: ServingConfig, concurrency: int, tag: str, index: int) -> Optional[str]:
    if not cfg.send_rid or cfg.endpoint != "generate":
        return None
    return f"pb-{cfg.seed}-{concurrency}-{tag}{index}"


def resolve_prompt_kind(cfg: ServingConfig, server_info: dict) -> str:
    if cfg.prompt != "auto":
        return cfg.prompt
    return "text" if server_info.get("mini_tokenizer") else "input_ids"


async def run_serving_async(base_url: str, cfg: ServingConfig,
                            progress: Optional[Progress] = None) -> list[PointResult]:
    """The sweep (see the module docstring). Stops early after a point where no request
    succeeded (the server is presumably gone); that point's errors say so."""
    import aiohttp

    base_url = base_url.rstrip("/")
    url = base_url + ENDPOINTS[cfg.endpoint]
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=cfg.timeout_s)
    out: list[PointResult] = []
    async with aiohttp.ClientSession(connector=connector, read_bufsize=1 << 20,
                                     auto_decompress=False) as session:
        info = await probe_server(session, base_url)
        kind = resolve_prompt_kind(cfg, info)
        model = cfg.model or info.get("served_model_name") or info.get("model_path") or "default"
        for c in cfg.concurrency:
            await open_connections(session, base_url, c)
            warm_errors: list = []
            if cfg.warmup:
                wl = min(cfg.output_len, WARMUP_MAX_OUTPUT)
                warm = [build_payload(cfg, make_prompt(kind, cfg, c, i, "w"), wl, model,
                                      _rid(cfg, c, "w", i))
                        for i in range(cfg.warmup)]
                wres, _ = await _closed_loop(session, url, warm, cfg, min(cfg.warmup, c), wl,
                                             timeout, "warmup", progress)
                warm_errors = [f"warmup: {r.error}" for r in wres if not r.ok]
            n = cfg.requests_at(c)
            payloads = [build_payload(cfg, make_prompt(kind, cfg, c, i), cfg.output_len, model,
                                      _rid(cfg, c, "m", i))
                        for i in range(n)]
            results, duration = await _closed_loop(session, url, payloads, cfg, c,
                                                   cfg.output_len, timeout, "measure", progress)
            point = summarize(c, results, duration, warm_errors)
            out.append(point)
            if point.metrics.get("completed", 0) == 0:
                point.errors.append(f"sweep stopped: no request succeeded at concurrency {c}")
                break
    return out


def run_serving(base_url: str, cfg: ServingConfig,
                progress: Optional[Progress] = None) -> list[PointResult]:
    """Synchronous wrapper of run_serving_async (runs its own event loop)."""
    return asyncio.run(run_serving_async(base_url, cfg, progress))


# ---------------------------------------------------------------------------------------------
# sglang bench_serving JSONL importer
# ---------------------------------------------------------------------------------------------
BENCH_SERVING_FIELDS = {
    # sglang field -> our metric
    "output_throughput": "output_tok_s",
    "input_throughput": "input_tok_s",
    "total_throughput": "total_tok_s",
    "request_throughput": "request_s",
    "completed": "completed",
    "duration": "duration_s",
    "concurrency": "concurrency_achieved",
    "mean_ttft_ms": "ttft_ms_mean",
    "median_ttft_ms": "ttft_ms_median",
    "p99_ttft_ms": "ttft_ms_p99",
    "std_ttft_ms": "ttft_ms_std",
    "mean_itl_ms": "itl_ms_mean",
    "median_itl_ms": "itl_ms_median",
    "p95_itl_ms": "itl_ms_p95",
    "p99_itl_ms": "itl_ms_p99",
    "max_itl_ms": "itl_ms_max",
    "std_itl_ms": "itl_ms_std",
    "mean_tpot_ms": "tpot_ms_mean",
    "median_tpot_ms": "tpot_ms_median",
    "p99_tpot_ms": "tpot_ms_p99",
    "std_tpot_ms": "tpot_ms_std",
    "mean_e2e_latency_ms": "e2e_ms_mean",
    "median_e2e_latency_ms": "e2e_ms_median",
    "p99_e2e_latency_ms": "e2e_ms_p99",
    "std_e2e_latency_ms": "e2e_ms_std",
}


def read_jsonl(source) -> list[dict]:
    """Rows of a JSONL file (a path) or JSONL text (a str containing a newline or '{')."""
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source
                                    and not source.lstrip().startswith("{")):
        path = Path(source)
        try:
            text = path.read_text()
        except OSError as e:
            raise BadInput(f"cannot read {path}: {e.strerror or e}")
        where = str(path)
    else:
        text, where = str(source), "<text>"
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise BadInput(f"{where}:{lineno}: not JSON: {e}")
        if not isinstance(row, dict):
            raise BadInput(f"{where}:{lineno}: a JSONL row must be an object")
        rows.append(row)
    return rows


def bench_serving_workload(row: dict) -> dict:
    """The workload a bench_serving row describes (to check it against a recipe)."""
    return {
        "backend": row.get("backend"),
        "dataset_name": row.get("dataset_name"),
        "input_len": row.get("random_input_len"),
        "output_len": row.get("random_output_len"),
        "range_ratio": row.get("random_range_ratio"),
        "max_concurrency": row.get("max_concurrency"),
        "request_rate": row.get("request_rate"),
    }


def parse_bench_serving_rows(rows: Iterable[dict]) -> list[Sample]:
    """Samples from sglang `bench_serving` result rows; point = max_concurrency (0 = unbounded)."""
    samples: list[Sample] = []
    for i, row in enumerate(rows, 1):
        if "output_throughput" not in row:
            raise BadInput(f"row {i} is not an sglang bench_serving result (no output_throughput)")
        point = int(row.get("max_concurrency") or 0)
        for field_name, metric in BENCH_SERVING_FIELDS.items():
            value = row.get(field_name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if isinstance(value, float) and math.isnan(value):
                    continue
                samples.append(Sample(metric, float(value), unit_of(metric), point,
                                      "concurrency"))
    return samples


def parse_bench_serving_jsonl(source) -> list[Sample]:
    """Samples from an sglang `bench_serving` JSONL file (path) or text."""
    return parse_bench_serving_rows(read_jsonl(source))


__all__ = [
    "DEFAULT_CONCURRENCY", "ServingConfig", "PointResult", "RequestResult", "run_serving",
    "run_serving_async", "summarize", "make_prompt", "build_payload", "percentile",
    "default_num_prompts", "probe_server", "parse_bench_serving_jsonl",
    "parse_bench_serving_rows", "bench_serving_workload", "read_jsonl", "unit_of",
]
