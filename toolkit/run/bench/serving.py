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

Prompts (toolkit/run/bench/workload.py) are deterministic from `seed`, the point's concurrency and the request index (random, so
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
import time
from typing import Callable, Optional

from toolkit.run.bench import server_account as account
from toolkit.run.bench.inflight import InFlight, Ticket
from toolkit.run.bench.point import PointResult, RequestResult, percentile, summarize  # noqa: F401
from toolkit.run.bench.sglang_jsonl import (  # noqa: F401  (re-exported: the importer lives there)
    bench_serving_workload, parse_bench_serving_jsonl, parse_bench_serving_rows, read_jsonl)
from toolkit.run.bench.workload import (  # noqa: F401  (re-exported: what the client sends)
    DEFAULT_CONCURRENCY, ENDPOINTS, WARMUP_MAX_OUTPUT, ServingConfig, build_payload, default_num_prompts,
    make_prompt)
from toolkit.results.metrics import unit_of  # noqa: F401

# progress(phase, concurrency, done, total); phase is "warmup" or "measure".
Progress = Callable[[str, int, int, int], None]

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
                   output_len: int, timeout, inflight: Optional[InFlight] = None) -> RequestResult:
    """Send one request and time it, telling `inflight` (if given) when it is sent, decoding and
    done. Never raises (errors are returned)."""
    if inflight is None:
        return await _timed(session, url, payload, cfg, input_len, output_len, timeout, None)
    ticket = inflight.request()
    try:
        return await _timed(session, url, payload, cfg, input_len, output_len, timeout, ticket)
    finally:
        ticket.close()


async def _timed(session, url: str, payload: bytes, cfg: ServingConfig, input_len: int,
                 output_len: int, timeout, ticket: Optional[Ticket]) -> RequestResult:
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
                    chunk_k = 0  # tokens of every event this read delivered: one arrival (see below)
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
                        if ticket is not None:
                            ticket.received(k, t)
                        chunk_k += k
                        n = new_n
                    # The events one read delivered arrived together: a client that lagged the server (a
                    # busy host, many streams on one event loop) reads several steps' events at once, and
                    # timing each event apart gave the first the whole gap and the others 0 ms (a median ITL
                    # of 0 and a p99 of several steps). Their tokens share the gap, as a k-token event's do.
                    if chunk_k <= 0:
                        continue
                    if first:
                        res.ttft = t - t0
                        first = False
                    else:
                        itl.extend([(t - last_t) / chunk_k] * chunk_k)
                    last_t = t
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
                       progress: Optional[Progress], inflight: Optional[InFlight] = None) -> tuple[list, float]:
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
                                        output_len, timeout, inflight)
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
                            progress: Optional[Progress] = None,
                            inflight: Optional[InFlight] = None,
                            compiled: Optional[Callable[[], int]] = None) -> list[PointResult]:
    """The sweep (see the module docstring). Stops early after a point where no request
    succeeded (the server is presumably gone); that point's errors say so. `inflight` follows
    the measured requests (toolkit.run.bench.inflight). `compiled`: a count of the files in the
    server's JIT caches, read before and after each measured window (PointResult.compiled_files)."""
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
        metrics = await account.read(session, base_url)  # None: no /metrics (no --enable-metrics)
        for c in cfg.concurrency:
            await open_connections(session, base_url, c)
            warm_errors: list = []
            flushed = await flush_prefix_cache(session, base_url) if cfg.flush_cache else None
            if cfg.warmup:
                wl = min(cfg.output_len, WARMUP_MAX_OUTPUT)
                n_warm = cfg.warmup_at(c)
                warm = [build_payload(cfg, make_prompt(kind, cfg, c, i, "w"), wl, model,
                                      _rid(cfg, c, "w", i))
                        for i in range(n_warm)]
                wres, _ = await _closed_loop(session, url, warm, cfg, min(n_warm, c), wl,
                                             timeout, "warmup", progress)
                warm_errors = [f"warmup: {r.error}" for r in wres if not r.ok]
                if metrics is not None:  # the window starts once the warm-up is counted
                    metrics = await _settled_reading(session, base_url, metrics, n_warm)
            n = cfg.requests_at(c)
            payloads = [build_payload(cfg, make_prompt(kind, cfg, c, i), cfg.output_len, model,
                                      _rid(cfg, c, "m", i))
                        for i in range(n)]
            files = compiled() if compiled else None
            results, duration = await _closed_loop(session, url, payloads, cfg, c,
                                                   cfg.output_len, timeout, "measure", progress, inflight)
            point = summarize(c, results, duration, warm_errors)
            point.prefix_cache = flushed
            point.compiled_files = compiled() - files if compiled else None
            if metrics is not None:
                after = await _settled_reading(session, base_url, metrics, n)
                if after is not None:
                    window = account.difference(metrics, after)
                    tokens = sum(r.completion_tokens for r in results) if all(r.ok for r in results) else None
                    problems, notes = account.findings(window, sent=n, client_tokens=tokens,
                                                       device=info.get("device"))
                    point.server = {**window, "notes": notes, "problems": problems}
                    per_verify = account.tokens_per_verify(window)
                    if per_verify is not None:  # speculative decoding's acceptance in this window
                        point.metrics["spec_tokens_per_verify"] = per_verify
                        point.units["spec_tokens_per_verify"] = unit_of("spec_tokens_per_verify")
                    point.errors.extend(problems)
                metrics = after
            out.append(point)
            if point.metrics.get("completed", 0) == 0:
                point.errors.append(f"sweep stopped: no request succeeded at concurrency {c}")
                break
    return out


FLUSH_WAIT_S = 30.0  # how long sglang may wait for the previous point's requests to leave (?timeout=)


async def flush_prefix_cache(session, base_url: str) -> str:
    """POST /flush_cache (sglang: empties the radix cache once no request is running or waiting; it
    waits up to FLUSH_WAIT_S for that): "flushed", or "not flushed: <why>" (the point is measured
    anyway and says so)."""
    import aiohttp

    try:
        async with session.post(f"{base_url}/flush_cache", params={"timeout": str(FLUSH_WAIT_S)},
                                timeout=aiohttp.ClientTimeout(total=FLUSH_WAIT_S + 30)) as r:
            text = (await r.text()).strip().splitlines()
            return "flushed" if r.status == 200 else f"not flushed: HTTP {r.status} {text[0] if text else ''}".rstrip()
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        return f"not flushed: {type(exc).__name__} {exc}".rstrip()


async def _settled_reading(session, base_url: str, before: dict, sent: int) -> Optional[dict]:
    """The server's reading once it counts the `sent` requests after `before` (its counters move when
    a request finishes, a moment after the client saw its last chunk), or the last reading after
    account.SETTLE_S (the difference then says what was missing); None when /metrics went away."""
    deadline = time.perf_counter() + account.SETTLE_S
    while True:
        now = await account.read(session, base_url)
        if now is None or account.settled(before, now, sent) or time.perf_counter() > deadline:
            return now
        await asyncio.sleep(0.02)


def run_serving(base_url: str, cfg: ServingConfig,
                progress: Optional[Progress] = None,
                compiled: Optional[Callable[[], int]] = None) -> list[PointResult]:
    """Synchronous wrapper of run_serving_async (runs its own event loop)."""
    return asyncio.run(run_serving_async(base_url, cfg, progress, compiled=compiled))


__all__ = [
    "DEFAULT_CONCURRENCY", "ServingConfig", "PointResult", "RequestResult", "run_serving",
    "run_serving_async", "summarize", "make_prompt", "build_payload", "percentile",
    "default_num_prompts", "probe_server", "parse_bench_serving_jsonl",
    "parse_bench_serving_rows", "bench_serving_workload", "read_jsonl", "unit_of",
]
