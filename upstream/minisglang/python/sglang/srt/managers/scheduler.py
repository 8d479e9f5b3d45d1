"""The miniature's scheduler: continuous batching paced by the cost model.

One asyncio task runs forward steps back to back. Each iteration is either

  * a prefill (extend) step that admits waiting requests (up to --max-running-requests running,
    --max-prefill-tokens input tokens per step; at least one) and emits their first token, costing
    `cost.prefill_s(total input tokens)`, or
  * a decode step over every running request, emitting one token each, costing
    `cost.decode_step_s(running batch size)`,

like sglang's default (non-mixed) scheduling: while a prefill runs, decoding pauses. Steps are paced
on monotonic deadlines: step k ends at `deadline_k = deadline_{k-1} + cost_k`, not at "now + cost",
so event-loop wake-up jitter and the time spent writing tokens do not accumulate. When the loop falls
more than LATE_RESET_S behind (or was idle) the deadline restarts from now.

Every finished request and every step is kept in a bounded in-memory trace (served at GET
/mini/trace) with time.perf_counter() timestamps taken right after each streamed chunk was handed
to its socket (step end for tokens not streamed on their own), which is the ground truth a
client's measurements can be checked against.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import sys
import time
import traceback
from typing import Callable, Deque, List, Optional

from sglang.srt import mini_tokenizer as tok
from sglang.srt.model_executor.cost import CostModel

logger = logging.getLogger("sglang.srt.managers.scheduler")

LATE_RESET_S = 0.005
SLEEP_MARGIN_S = 0.0012
DECODE_LOG_INTERVAL = 40
TRACE_MAX_REQUESTS = 50_000
TRACE_MAX_STEPS = 200_000


async def _sleep_until(deadline: float) -> None:
    """Sleep until `deadline` (perf_counter) with ~0.1 ms precision.

    Event-loop timers are only good to ~1 ms: the selector rounds its timeout up to whole
    milliseconds (and asyncio's epoll path in CPython 3.11 rounds twice, up to ~2 ms late), which
    would put a sawtooth on every step. So: yield to the loop until SLEEP_MARGIN_S before the
    deadline (HTTP traffic is served meanwhile), then finish with a short blocking time.sleep(),
    like a host thread waiting on a GPU stream. The server runs its loop on a PollSelector
    (single rounding), which keeps the blocking part to ~0.6 ms per step on average.
    """
    delay = deadline - time.perf_counter()
    if delay > SLEEP_MARGIN_S:
        await asyncio.sleep(delay - SLEEP_MARGIN_S)
    else:
        await asyncio.sleep(0)
    delay = deadline - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


class Req:
    """One generation request inside the scheduler."""

    __slots__ = (
        "rid", "kind", "prompt_tokens", "max_new_tokens", "ignore_eos", "seed", "eos_at",
        "completion_tokens", "text", "created", "first_token_time", "token_times",
        "finish_reason", "sink", "done", "is_probe", "aborted", "output_ids", "logprobs",
    )

    def __init__(self, rid: str, kind: str, prompt, max_new_tokens: int, ignore_eos: bool,
                 sink: Optional[Callable[["Req", int, bool], bool]], is_probe: bool = False):
        self.rid = rid
        self.kind = kind
        self.prompt_tokens = tok.count_tokens(prompt)
        self.max_new_tokens = max_new_tokens
        self.ignore_eos = ignore_eos
        self.seed = tok.prompt_seed(prompt)
        self.eos_at = tok.eos_position(self.seed)
        self.completion_tokens = 0
        self.text = ""
        self.created = time.perf_counter()
        self.first_token_time: Optional[float] = None
        self.token_times: List[float] = []
        self.finish_reason: Optional[dict] = None
        self.sink = sink  # called after tokens were added: sink(req, n_new, finished) -> alive?
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        self.is_probe = is_probe
        self.aborted = False
        self.output_ids: List[int] = []
        self.logprobs: List[float] = []

    def step_row(self) -> tuple:
        """(previous token, prompt seed, position): what the torch step computes this request's
        next token from (the first token's "previous" is drawn from the prompt)."""
        prev = self.output_ids[-1] if self.output_ids else self.seed
        return (prev, self.seed, self.completion_tokens)

    def add_token(self, t: float, computed: Optional[tuple] = None) -> bool:
        """Append one generated token at time t (`computed`: (lm_head index, logprob) from the torch
        step; else the tokenizer's word for the prompt); return True when the request is finished."""
        i = self.completion_tokens
        if computed is None:
            self.text += tok.token_piece(self.seed, i)
            self.output_ids.append(tok.token_id(self.seed, i))
            self.logprobs.append(0.0)
        else:
            index, logprob = computed
            self.text += tok.computed_piece(index)
            self.output_ids.append(tok.computed_id(index))
            self.logprobs.append(float(logprob))
        self.completion_tokens = i + 1
        self.token_times.append(t)
        if self.first_token_time is None:
            self.first_token_time = t
        n = self.completion_tokens
        if n >= self.max_new_tokens:
            self.finish_reason = {"type": "length", "length": n}
            return True
        if not self.ignore_eos and n >= self.eos_at:
            self.finish_reason = {"type": "stop", "matched": tok.EOS_TOKEN_ID}
            return True
        return False


class Scheduler:
    def __init__(self, cost: CostModel, *, max_running_requests: Optional[int] = None,
                 max_prefill_tokens: int = 16384, stream_interval: int = 1,
                 crash_after_requests: Optional[int] = None,
                 on_crash: Optional[Callable[[], None]] = None,
                 torch_step=None, profiler=None):
        self.cost = cost
        self.max_running_requests = max_running_requests
        self.max_prefill_tokens = max_prefill_tokens
        self.stream_interval = max(1, stream_interval)
        self.crash_after_requests = crash_after_requests
        self.on_crash = on_crash
        self.torch_step = torch_step  # model_executor.torch_step.TorchStep or None (cost model only)
        self.profiler = profiler  # managers.profiler_manager.ProfilerManager or None
        self.waiting: Deque[Req] = collections.deque()
        self.running: List[Req] = []
        self.finished_requests = 0  # user requests (not health probes)
        self.total_generated_tokens = 0
        self.late_resets = 0
        self.trace_requests: Deque[dict] = collections.deque(maxlen=TRACE_MAX_REQUESTS)
        self.trace_steps: Deque[tuple] = collections.deque(maxlen=TRACE_MAX_STEPS)
        self._wake = asyncio.Event()
        self._decode_steps = 0
        self._last_log_t = time.perf_counter()
        self._last_log_tokens = 0
        self.last_gen_throughput = 0.0
        self.metrics = None  # observability.metrics_collector.MetricsCollector with --enable-metrics

    # -- requests -----------------------------------------------------------------------------
    def submit(self, req: Req) -> None:
        self.waiting.append(req)
        self._wake.set()

    def trace(self) -> dict:
        return {
            "clock": "time.perf_counter",
            "requests": list(self.trace_requests),
            "steps": [
                {"t_end": t, "kind": k, "batch": b, "planned_s": p, "actual_s": a}
                for (t, k, b, p, a) in self.trace_steps
            ],
            "late_resets": self.late_resets,
        }

    def reset_trace(self) -> None:
        self.trace_requests.clear()
        self.trace_steps.clear()
        self.late_resets = 0

    # -- the loop -----------------------------------------------------------------------------
    async def event_loop(self) -> None:
        deadline: Optional[float] = None
        prev_end: Optional[float] = None
        while True:
            if not self.waiting and not self.running:
                self._wake.clear()
                await self._wake.wait()
                deadline = None
            now = time.perf_counter()
            if deadline is None or now > deadline + LATE_RESET_S:
                if deadline is not None:
                    self.late_resets += 1
                deadline = now
                prev_end = now
            self._maybe_crash()

            if self.waiting and self._room() > 0:
                batch = self._admit()
                kind = "prefill"
                cost = self.cost.prefill_s(sum(r.prompt_tokens for r in batch))
            else:
                batch = self.running
                kind = "decode"
                cost = self.cost.decode_step_s(len(batch))

            deadline += cost
            tokens = self._forward(kind, batch)
            await _sleep_until(deadline)
            if self.profiler is not None:
                self.profiler.end_step(kind)
            t = time.perf_counter()
            self.trace_steps.append((t, kind, len(batch), cost, t - prev_end))
            prev_end = t
            if kind == "prefill":
                self._emit(batch, t, prefill=True, tokens=tokens)
                self._log_prefill(batch)
            else:
                self._emit(batch, t, prefill=False, tokens=tokens)
                if self.metrics is not None:
                    self.metrics.decode_pass(len(batch))
                self._decode_steps += 1
                if self._decode_steps % DECODE_LOG_INTERVAL == 0:
                    self._log_decode()

    def _forward(self, kind: str, batch: List[Req]) -> Optional[list]:
        """The step's real work (with --mini-torch-step) inside the profiler's step span; the cost
        model's deadline then paces it: a step lasts max(real work, cost). With the torch step, the
        tokens it computed (one (index, logprob) per request of the batch), else None."""
        if self.profiler is not None:
            tokens = sum(r.prompt_tokens for r in batch) if kind == "prefill" else len(batch)
            self.profiler.begin_step(kind, len(batch), tokens)
        if self.torch_step is not None and batch:
            return self.torch_step.run(len(batch), [r.step_row() for r in batch])
        return None

    def _room(self) -> float:
        if self.max_running_requests is None:
            return float("inf")
        return self.max_running_requests - len(self.running)

    def _admit(self) -> List[Req]:
        room = self._room()
        batch: List[Req] = []
        tokens = 0
        while self.waiting and len(batch) < room:
            r = self.waiting[0]
            if r.aborted:
                self.waiting.popleft()
                continue
            if batch and tokens + r.prompt_tokens > self.max_prefill_tokens:
                break
            self.waiting.popleft()
            batch.append(r)
            tokens += r.prompt_tokens
        return batch

    def _emit(self, batch: List[Req], t: float, prefill: bool, tokens: Optional[list] = None) -> None:
        interval = self.stream_interval
        still_running: List[Req] = [] if not prefill else self.running
        for j, r in enumerate(batch):
            if r.aborted:
                self._finish(r, aborted=True)
                continue
            finished = r.add_token(t, tokens[j] if tokens else None)
            self.total_generated_tokens += 1
            alive = True
            if r.sink is not None and (finished or r.completion_tokens % interval == 0
                                       or r.completion_tokens == 1):
                alive = r.sink(r, finished)
                r.token_times[-1] = time.perf_counter()  # when it was handed to the socket
            if finished or not alive:
                self._finish(r, aborted=not alive and not finished)
            else:
                still_running.append(r)
        if not prefill:
            self.running = still_running

    def _finish(self, r: Req, aborted: bool = False) -> None:
        r.aborted = r.aborted or aborted
        if not r.is_probe and not r.aborted:
            self.finished_requests += 1
        if not r.is_probe and self.metrics is not None:
            self.metrics.finished(r.prompt_tokens, r.completion_tokens, r.token_times, r.aborted)
        self.trace_requests.append({
            "rid": r.rid,
            "kind": "probe" if r.is_probe else r.kind,
            "arrival": r.created,
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.completion_tokens,
            "token_times": r.token_times,
            "aborted": r.aborted,
        })
        if not r.done.done():
            r.done.set_result(r)

    # -- failure injection --------------------------------------------------------------------
    def _maybe_crash(self) -> None:
        n = self.crash_after_requests
        if n is None or self.finished_requests < n:
            return
        try:
            self._forward_after_illegal_access()
        except RuntimeError:
            ts = time.strftime("%Y-%m-%d %H:%M:%S")
            sys.stderr.write(f"[{ts} TP0] Scheduler hit an exception: {traceback.format_exc()}")
            sys.stderr.write(f"[{ts}] Received sigquit from a child process. It usually means the "
                             "child failed.\n")
            sys.stderr.flush()
        if self.on_crash is not None:
            self.on_crash()
        os._exit(1)

    def _forward_after_illegal_access(self) -> None:
        raise RuntimeError(
            "CUDA error: an illegal memory access was encountered\n"
            "CUDA kernel errors might be asynchronously reported at some other API call, so the "
            "stacktrace below might be incorrect.\n"
            "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
            "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
        )

    # -- logs ---------------------------------------------------------------------------------
    def _log_prefill(self, batch: List[Req]) -> None:
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "Prefill batch. #new-seq: %d, #new-token: %d, #cached-token: 0, "
                "#running-req: %d, #queue-req: %d",
                len(batch), sum(r.prompt_tokens for r in batch), len(self.running),
                len(self.waiting))

    def _log_decode(self) -> None:
        now = time.perf_counter()
        dt = now - self._last_log_t
        if dt > 0:
            self.last_gen_throughput = (self.total_generated_tokens - self._last_log_tokens) / dt
        self._last_log_t = now
        self._last_log_tokens = self.total_generated_tokens
        if logger.isEnabledFor(logging.INFO):
            tokens = sum(r.prompt_tokens + r.completion_tokens for r in self.running)
            logger.info(
                "Decode batch. #running-req: %d, #token: %d, cuda graph: True, "
                "gen throughput (token/s): %.2f, #queue-req: %d",
                len(self.running), tokens, self.last_gen_throughput, len(self.waiting))
