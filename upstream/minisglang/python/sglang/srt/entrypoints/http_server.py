"""The miniature's HTTP server: hand-written HTTP/1.1 (keep-alive, chunked streaming) on asyncio.

Endpoints (sglang's names and shapes):
  GET  /health, /health_generate    200 once ready (503 before); /health_generate runs a 1-token
                                    generation through the scheduler, like sglang
  GET  /server_info, /get_server_info   flat JSON of the effective ServerArgs + "version"
  GET  /get_model_info, /v1/models
  POST /generate                    sglang native API, SSE streaming with cumulative "text"
  POST /v1/completions              OpenAI completions, SSE streaming with delta "text"
  POST /v1/chat/completions         OpenAI chat (serving_chat: messages joined into one prompt)
  POST /flush_cache                 200
  GET  /mini/trace, POST /mini/trace/reset   miniature only: ground-truth token timestamps
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import multiprocessing
import os
import selectors
import signal
import sys
import time
import uuid
from typing import Optional, Tuple

from sglang.srt.managers.io_struct import ProfileReq
from sglang.srt.managers.profiler_manager import ProfileError, ProfilerManager, ProfileStateError
from sglang.srt.managers.scheduler import Req, Scheduler
from sglang.srt.model_executor import cost as cost_mod
from sglang.srt.server_args import ServerArgs
from sglang.version import __version__

logger = logging.getLogger("sglang.srt.entrypoints.http_server")

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            500: "Internal Server Error", 503: "Service Unavailable"}
_DONE = b"data: [DONE]\n\n"


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"



def stream_flags(obj: dict) -> tuple[bool, bool, bool]:
    """An OpenAI request's (stream, include_usage, continuous_usage_stats)."""
    options = obj.get("stream_options") or {}
    include_usage = bool(options.get("include_usage", False))
    return bool(obj.get("stream", False)), include_usage, include_usage and bool(options.get("continuous_usage_stats"))


def usage(r) -> dict:
    """An OpenAI response's `usage` for a finished or running request."""
    return {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
            "total_tokens": r.prompt_tokens + r.completion_tokens}

class BadRequest(Exception):
    pass


class HttpServer:
    def __init__(self, server_args: ServerArgs, scheduler: Scheduler, child_pids: Tuple[int, ...]):
        self.args = server_args
        self.scheduler = scheduler
        self.child_pids = child_pids
        self.ready = False
        self.started = time.time()

    # -- connection handling ------------------------------------------------------------------
    async def handle_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    break
                lines = head.decode("latin-1").split("\r\n")
                try:
                    method, target, version = lines[0].split(" ", 2)
                except ValueError:
                    break
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = b""
                if "content-length" in headers:
                    body = await reader.readexactly(int(headers["content-length"]))
                elif headers.get("transfer-encoding", "").lower() == "chunked":
                    body = await self._read_chunked(reader)
                conn = headers.get("connection", "").lower()
                keep_alive = (conn != "close") if version == "HTTP/1.1" else (conn == "keep-alive")
                path = target.split("?", 1)[0]
                self.headers = headers  # this request's, for a handler that reads them before its first await
                keep_alive = await self.dispatch(method, path, body, writer, keep_alive)
                await writer.drain()
                if not keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:  # a bug here must not kill the server
            logger.exception("error while handling a connection")
        finally:
            try:
                writer.close()
            except Exception:
                pass

    @staticmethod
    async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return b"".join(parts)
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)

    @staticmethod
    def _head(status: int, content_type: str, keep_alive: bool, length: Optional[int], extra=()) -> bytes:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}",
                 f"content-type: {content_type}",
                 "server: minisglang",
                 f"connection: {'keep-alive' if keep_alive else 'close'}", *extra]
        if length is None:
            lines.append("transfer-encoding: chunked")
            lines.append("cache-control: no-cache")
        else:
            lines.append(f"content-length: {length}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _send_json(self, writer, status: int, obj, keep_alive: bool) -> bool:
        body = json.dumps(obj).encode()
        writer.write(self._head(status, "application/json", keep_alive, len(body)) + body)
        return keep_alive

    def _send_text(self, writer, status: int, text: str, keep_alive: bool) -> bool:
        body = text.encode()
        writer.write(self._head(status, "text/plain; charset=utf-8", keep_alive, len(body)) + body)
        return keep_alive

    # -- routing ------------------------------------------------------------------------------
    async def dispatch(self, method: str, path: str, body: bytes, writer, keep_alive: bool) -> bool:
        get_routes = {
            "/health": self.health,
            "/health_generate": self.health_generate,
            "/server_info": self.server_info,
            "/get_server_info": self.server_info,
            "/get_model_info": self.model_info,
            "/v1/models": self.models,
            "/mini/trace": self.get_trace,
        }
        if self.scheduler.metrics is not None:  # sglang mounts /metrics only with --enable-metrics
            get_routes["/metrics"] = self.metrics
        post_routes = {
            "/generate": self.generate,
            "/v1/completions": self.completions,
            "/v1/chat/completions": self.chat_completions,
            "/flush_cache": self.flush_cache,
            "/mini/trace/reset": self.reset_trace,
            "/start_profile": self.start_profile,
            "/stop_profile": self.stop_profile,
        }
        routes = get_routes if method == "GET" else post_routes if method == "POST" else {}
        handler = routes.get(path)
        if handler is None:
            other = post_routes if routes is get_routes else get_routes
            if path in other:
                return self._send_json(writer, 405, {"detail": "Method Not Allowed"}, keep_alive)
            return self._send_json(writer, 404, {"detail": "Not Found"}, keep_alive)
        try:
            return await handler(body, writer, keep_alive)
        except BadRequest as e:
            return self._send_json(writer, 400, {"error": {"message": str(e)}}, keep_alive)

    # -- simple endpoints ---------------------------------------------------------------------
    async def health(self, body, writer, keep_alive):
        if not self.ready:
            return self._send_text(writer, 503, "", keep_alive)
        return self._send_text(writer, 200, "", keep_alive)

    async def health_generate(self, body, writer, keep_alive):
        if not self.ready:
            return self._send_text(writer, 503, "", keep_alive)
        req = Req(f"HEALTH_CHECK_{uuid.uuid4().hex}", "generate", [0], 1, True, None, is_probe=True)
        self.scheduler.submit(req)
        try:
            await asyncio.wait_for(asyncio.shield(req.done), timeout=20)
        except asyncio.TimeoutError:
            req.aborted = True
            return self._send_text(writer, 503, "", keep_alive)
        return self._send_text(writer, 200, "", keep_alive)

    async def server_info(self, body, writer, keep_alive):
        info = self.args.to_dict()
        info["version"] = __version__
        # One dict per DP rank, as sglang 0.5.23's get_internal_state: the resolved arguments plus a
        # few scheduler facts. No live queue counts (sglang has none there).
        info["internal_states"] = [{
            **self.args.to_dict(),
            "world_size": self.args.tp_size * self.args.pp_size,
            "startup_time": self.started,
            "effective_max_running_requests_per_dp": self.args.max_running_requests,
            # sglang's KV pool size; the miniature has no pool, only the limit it was given
            "memory_usage": {"token_capacity": self.args.max_total_tokens},
            "last_gen_throughput": self.scheduler.last_gen_throughput,
        }]
        info["mini_cost_model"] = self.scheduler.cost.to_dict()
        info["mini_cost_module"] = os.path.abspath(cost_mod.__file__)
        info["mini_tokenizer"] = "whitespace-words-v1"
        # where generated tokens come from: the torch step's greedy argmax, or the prompt's hash
        info["mini_outputs"] = "torch-step" if self.scheduler.torch_step is not None else "prompt-hash"
        info["mini_child_pids"] = list(self.child_pids)
        info["mini_ready"] = self.ready
        return self._send_json(writer, 200, info, keep_alive)

    async def model_info(self, body, writer, keep_alive):
        return self._send_json(writer, 200, {
            "model_path": self.args.model_path,
            "tokenizer_path": self.args.tokenizer_path,
            "is_generation": True,
        }, keep_alive)

    async def models(self, body, writer, keep_alive):
        return self._send_json(writer, 200, {"object": "list", "data": [{
            "id": self.args.served_model_name, "object": "model", "created": int(self.started),
            "owned_by": "sglang", "root": self.args.model_path,
        }]}, keep_alive)

    async def metrics(self, body, writer, keep_alive):
        """Prometheus text; gzipped for a client that accepts gzip, as sglang's exporter does."""
        body = self.scheduler.metrics.render().encode()
        extra = ()
        if "gzip" in self.headers.get("accept-encoding", ""):
            body, extra = gzip.compress(body), ("content-encoding: gzip",)
        writer.write(self._head(200, "text/plain; version=0.0.4; charset=utf-8", keep_alive, len(body), extra) + body)
        return keep_alive

    async def flush_cache(self, body, writer, keep_alive):
        return self._send_text(writer, 200, "Cache flushed.\n", keep_alive)

    async def get_trace(self, body, writer, keep_alive):
        return self._send_json(writer, 200, self.scheduler.trace(), keep_alive)

    async def reset_trace(self, body, writer, keep_alive):
        self.scheduler.reset_trace()
        return self._send_json(writer, 200, {"ok": True}, keep_alive)

    # -- profiling ----------------------------------------------------------------------------
    async def start_profile(self, body, writer, keep_alive):
        """Arm the profiler and answer at once (sglang 0.5.23): the trace comes later, by itself
        after `num_steps` steps, else at /stop_profile."""
        try:
            req = ProfileReq.from_json(self._parse_json(body))
        except (TypeError, ValueError) as e:
            raise BadRequest(str(e))
        try:
            self.scheduler.profiler.configure(req)
        except ProfileStateError as e:
            return self._internal_error(writer, e, keep_alive)
        except ProfileError as e:
            raise BadRequest(str(e))
        return self._send_text(writer, 200, "Start profiling.\n", keep_alive)

    async def stop_profile(self, body, writer, keep_alive):
        try:
            self.scheduler.profiler.stop()
        except ProfileStateError as e:
            return self._internal_error(writer, e, keep_alive)
        return self._send_text(writer, 200, "Stop profiling. This will take some time.\n", keep_alive)

    def _internal_error(self, writer, exc: Exception, keep_alive: bool) -> bool:
        """What sglang's HTTP server does with the RuntimeError its handler raises when the scheduler
        refuses: the exception in the log, a plain 500 to the client."""
        logger.error("Exception in ASGI application\nRuntimeError: %s", exc)
        return self._send_text(writer, 500, "Internal Server Error", keep_alive)

    # -- generation ---------------------------------------------------------------------------
    @staticmethod
    def _parse_json(body: bytes) -> dict:
        try:
            obj = json.loads(body or b"{}")
        except ValueError as e:
            raise BadRequest(f"invalid JSON body: {e}")
        if not isinstance(obj, dict):
            raise BadRequest("the request body must be a JSON object")
        return obj

    @staticmethod
    def _prompt(obj: dict, text_key: str):
        if obj.get(text_key) is not None:
            prompt = obj[text_key]
        elif obj.get("input_ids") is not None:
            prompt = obj["input_ids"]
        else:
            raise BadRequest(f"either {text_key!r} or 'input_ids' is required")
        if isinstance(prompt, str):
            return prompt
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            return prompt
        raise BadRequest("batched requests are not supported by the miniature: send one prompt "
                         "(a string or a list of token ids)")

    def _check_length(self, req: Req) -> None:
        """Like sglang's scheduler: reject prompts that do not fit the context and silently cap
        max_new_tokens at context_length - prompt_tokens - 1."""
        limit = self.args.context_length
        if limit is None:
            return
        if req.prompt_tokens >= limit:
            raise BadRequest(f"The input ({req.prompt_tokens} tokens) is longer than the model's "
                             f"context length ({limit} tokens).")
        req.max_new_tokens = max(1, min(req.max_new_tokens, limit - req.prompt_tokens - 1))

    async def _run(self, req: Req, writer, keep_alive: bool, stream: bool) -> bool:
        self._check_length(req)
        if not self.ready:
            return self._send_json(writer, 503, {"error": {"message": "server not ready"}},
                                   keep_alive)
        if stream:
            writer.write(self._head(200, "text/event-stream", keep_alive, None))
        self.scheduler.submit(req)
        try:
            await req.done
        except asyncio.CancelledError:
            req.aborted = True
            raise
        if req.aborted:
            return False
        return keep_alive

    async def generate(self, body, writer, keep_alive):
        obj = self._parse_json(body)
        prompt = self._prompt(obj, "text")
        sp = obj.get("sampling_params") or {}
        max_new = int(sp.get("max_new_tokens", 128))
        if max_new < 0:
            raise BadRequest("max_new_tokens must be >= 0")
        stream = bool(obj.get("stream", False))
        rid = str(obj.get("rid") or uuid.uuid4().hex)
        if max_new == 0 and not stream:  # a prefill only (sglang's frontend caches prefixes so)
            from sglang.srt import mini_tokenizer as tok

            return self._send_json(writer, 200, {"text": "", "output_ids": [], "meta_info": {
                "id": rid, "finish_reason": {"type": "length", "length": 0},
                "prompt_tokens": tok.count_tokens(prompt), "completion_tokens": 0, "cached_tokens": 0}},
                keep_alive)

        def meta(r: Req, finished: bool) -> dict:
            m = {"id": r.rid, "finish_reason": r.finish_reason if finished else None,
                 "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
                 "cached_tokens": 0}
            if finished:
                m["e2e_latency"] = time.perf_counter() - r.created
            return m

        if stream:
            def sink(r: Req, finished: bool) -> bool:
                if writer.is_closing():
                    return False
                data = _sse({"text": r.text, "output_ids": r.output_ids, "meta_info": meta(r, finished),
                             "index": 0})
                if finished:
                    writer.write(_chunk(data + _DONE) + b"0\r\n\r\n")
                else:
                    writer.write(_chunk(data))
                return True

            req = Req(rid, "generate", prompt, max_new, bool(sp.get("ignore_eos", False)), sink)
            return await self._run(req, writer, keep_alive, stream=True)

        req = Req(rid, "generate", prompt, max_new, bool(sp.get("ignore_eos", False)), None)
        keep = await self._run(req, writer, keep_alive, stream=False)
        if req.aborted:
            return False
        info = meta(req, True)
        if obj.get("return_logprob"):
            info["output_token_logprobs"] = [[lp, i, None] for lp, i in zip(req.logprobs, req.output_ids)]
        return self._send_json(writer, 200, {"text": req.text, "output_ids": req.output_ids,
                                             "meta_info": info}, keep)

    async def completions(self, body, writer, keep_alive):
        obj = self._parse_json(body)
        prompt = self._prompt(obj, "prompt")
        max_new = int(obj.get("max_tokens") or 16)
        stream, include_usage, continuous_usage = stream_flags(obj)
        model = obj.get("model") or self.args.served_model_name
        rid = str(obj.get("rid") or uuid.uuid4().hex)
        created = int(time.time())
        cid = f"cmpl-{rid}"

        if stream:
            sent = [0]  # characters of req.text already sent

            def sink(r: Req, finished: bool) -> bool:
                if writer.is_closing():
                    return False
                delta = r.text[sent[0]:]
                sent[0] = len(r.text)
                fr = r.finish_reason["type"] if finished else None
                data = _sse({"id": cid, "object": "text_completion", "created": created,
                             "model": model, "choices": [{"index": 0, "text": delta,
                                                          "logprobs": None, "finish_reason": fr}],
                             "usage": usage(r) if continuous_usage else None})
                if finished:
                    if include_usage:
                        data += _sse({"id": cid, "object": "text_completion", "created": created,
                                      "model": model, "choices": [], "usage": usage(r)})
                    writer.write(_chunk(data + _DONE) + b"0\r\n\r\n")
                else:
                    writer.write(_chunk(data))
                return True

            req = Req(rid, "completions", prompt, max_new, bool(obj.get("ignore_eos", False)), sink)
            return await self._run(req, writer, keep_alive, stream=True)

        req = Req(rid, "completions", prompt, max_new, bool(obj.get("ignore_eos", False)), None)
        keep = await self._run(req, writer, keep_alive, stream=False)
        if req.aborted:
            return False
        return self._send_json(writer, 200, {
            "id": cid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": req.text, "logprobs": None,
                         "finish_reason": req.finish_reason["type"]}],
            "usage": usage(req)}, keep)

    async def chat_completions(self, body, writer, keep_alive):
        from sglang.srt.entrypoints import serving_chat

        return await serving_chat.chat_completions(self, self._parse_json(body), writer, keep_alive)


# -- process ----------------------------------------------------------------------------------
def _detokenizer_main(parent_pid: int) -> None:
    """Stand-in for sglang's detokenizer subprocess: idles until terminated.

    It does not watch its parent closely: if the server is SIGKILLed without its process group,
    this child lingers (for up to 10 minutes), so process-group teardown is tested for real.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    orphaned_at = None
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            orphaned_at = orphaned_at or time.monotonic()
            if time.monotonic() - orphaned_at > 600:
                os._exit(0)


def _configure_logging(level: str) -> None:
    try:
        sys.stdout.reconfigure(line_buffering=True)
    except (AttributeError, ValueError):
        pass
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="[%(asctime)s] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stdout,
        force=True,
    )


def launch_server(server_args: ServerArgs) -> None:
    """Start the child process, the scheduler and the HTTP server; return on SIGTERM/SIGINT."""
    _configure_logging(server_args.log_level)
    logger.info("server_args=%s", server_args)
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_detokenizer_main, args=(os.getpid(),),
                        name="sglang::detokenizer", daemon=False)
    child.start()

    def kill_child() -> None:
        if child.is_alive():
            child.terminate()
            child.join(5)
            if child.is_alive():
                child.kill()

    # A PollSelector loop: its timeout is rounded up to whole milliseconds once (the epoll path
    # may round twice), see scheduler._sleep_until.
    loop = asyncio.SelectorEventLoop(selectors.PollSelector())
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(_serve(server_args, (child.pid,), kill_child))
    finally:
        try:
            _cancel_all(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
            kill_child()
    logger.info("Shutdown complete.")
    sys.stdout.flush()


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


async def _serve(server_args: ServerArgs, child_pids, kill_child) -> None:
    loop = asyncio.get_running_loop()
    cm = cost_mod.from_server_args(server_args)

    def on_crash() -> None:
        try:
            kill_child()
        finally:
            sys.stdout.flush()

    from sglang.srt.model_executor import flashinfer_jit, start_tuning

    flashinfer_jit.maybe_build()  # FlashInfer's JIT at model load (after sglang's set_cuda_arch)
    start_tuning.maybe_tune()
    torch_step = None
    if server_args.mini_torch_step:
        from sglang.srt.model_executor import torch_step as ts

        torch_step = ts.TorchStep()
        logger.info("torch step: real MoE-shaped work on %s each forward step (experts=%d top_k=%d "
                    "expert_intermediate=%d)", torch_step.device, ts.N_EXPERTS, ts.TOP_K, ts.EXPERT_INTERMEDIATE)
    scheduler = Scheduler(
        cm,
        torch_step=torch_step,
        profiler=ProfilerManager(server_args.tp_size),
        max_running_requests=server_args.max_running_requests,
        max_prefill_tokens=server_args.max_prefill_tokens,
        stream_interval=server_args.stream_interval,
        crash_after_requests=server_args.mini_crash_after_requests,
        on_crash=on_crash,
    )
    if server_args.enable_metrics:
        from sglang.srt.observability.metrics_collector import MetricsCollector

        scheduler.metrics = MetricsCollector(server_args.served_model_name or server_args.model_path,
                                             device=server_args.device, graph_max_bs=server_args.cuda_graph_max_bs,
                                             graphs=not server_args.disable_cuda_graph)
    http = HttpServer(server_args, scheduler, tuple(child_pids))
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    sched_task = asyncio.create_task(scheduler.event_loop())
    server = await asyncio.start_server(http.handle_connection, server_args.host,
                                        server_args.port, backlog=4096, limit=1 << 20)
    logger.info("Started server process [%d]", os.getpid())
    logger.info("cost model: %s", cm.to_dict())
    logger.info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)",
                server_args.host, server_args.port)

    async def become_ready() -> None:
        if server_args.mini_startup_s > 0:
            await asyncio.sleep(server_args.mini_startup_s)
        if not server_args.skip_server_warmup:
            warm = Req(f"WARMUP_{uuid.uuid4().hex}", "generate", [0], 1, True, None, is_probe=True)
            scheduler.submit(warm)
            await warm.done
        http.ready = True
        logger.info("The server is fired up and ready to roll!")

    ready_task = asyncio.create_task(become_ready())
    await stop.wait()
    logger.info("Received termination signal, shutting down.")
    server.close()
    for task in (ready_task, sched_task):
        task.cancel()
    for task in (ready_task, sched_task):
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass
