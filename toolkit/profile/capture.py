"""The effects of `patchbench profile`: ask the env which ProfileReq fields it takes, drive a decode
load, start recording once the load is at steady decode, and wait for the traces the server writes.

sglang 0.5.23's `/start_profile` answers at once, before anything is recorded. With `num_steps` the
server stops by itself once that many forward steps are recorded (it checks at the start of the next
step, so an idle server writes nothing) and writes one `<prefix->]<id>-TP-<rank>...trace.json.gz`
per rank; a later `/stop_profile` answers 500 ("Profiling is not in progress", in the server log).
So the capture:
  1. starts the load and waits until the load generator itself sees `concurrency` requests in flight,
     every one past its first token (toolkit.run.bench.inflight): from then each step is a decode
     step over all of them (the server's own counters are not needed, and 0.5.23 has none);
  2. POSTs /start_profile; with `num_steps` it never calls /stop_profile while the load runs; it polls
     the output directory until every expected rank's trace is complete (its size stable and, gzipped,
     readable to the end), or the load ended (then one /stop_profile flushes what was recorded), or the
     timeout passed (an error naming the directory and the server log);
  3. without `num_steps` (older servers) it lets about `steps` tokens per request pass, then calls
     /stop_profile; a 500 there once traces exist is not a failure.
Whether the traces hold the decode steps asked is the session's question (`short_trace`)."""

from __future__ import annotations

import asyncio
import gzip
import json
import subprocess
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import PatchbenchError
from toolkit.profile import window
from toolkit.resources import PROBES_DIR

PROBE = PROBES_DIR / "profile_req.py"
# sglang 0.5.23's ProfileReq (managers/io_struct.py); older releases accept a subset.
PROFILE_FIELDS_0523 = ("output_dir", "start_step", "num_steps", "activities", "profile_by_stage", "with_stack",
                       "record_shapes", "profile_id", "merge_profiles", "profile_prefix")
OLDEST_FIELDS = ("output_dir", "num_steps", "activities")
TRACE_GLOBS = ("*.trace.json.gz", "*.trace.json", "*.pt.trace.json*")
POLL_S = 0.25
STEADY_TIMEOUT_S = 120.0  # the longest wait for the load to reach steady decode


def accepted_fields(python: str | Path, environ: dict) -> tuple[tuple[str, ...], str]:
    """The ProfileReq fields the env's sglang accepts, and where that came from."""
    try:
        proc = subprocess.run([str(python), str(PROBE)], capture_output=True, text=True, env=environ, timeout=300)
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return OLDEST_FIELDS, f"probe failed ({type(exc).__name__}); sending the oldest field set"
    if not data.get("fields"):
        return OLDEST_FIELDS, f"no ProfileReq in the env ({data.get('error')}); sending the oldest field set"
    return tuple(data["fields"]), f"ProfileReq of sglang {data.get('version')}"


def profile_body(accepted: tuple[str, ...], *, output_dir: str, num_steps: int, profile_id: str,
                 gpu: bool) -> dict:
    """The /start_profile body: decode steps with shapes, only the fields the server accepts."""
    want = {
        "output_dir": output_dir,
        "num_steps": num_steps,
        "activities": ["CPU", "GPU"] if gpu else ["CPU"],
        "record_shapes": True,
        "with_stack": False,
        "profile_by_stage": False,
        "merge_profiles": False,
        "profile_id": profile_id,
        "profile_prefix": "patchbench",
    }
    return {k: v for k, v in want.items() if k in accepted}


@dataclass
class Capture:
    traces: list[Path]
    body: dict
    points: list = field(default_factory=list)  # toolkit.run.bench.serving.PointResult
    errors: list[str] = field(default_factory=list)  # why the capture has no usable trace
    notes: list[str] = field(default_factory=list)  # what happened that is not a failure
    seconds: float = 0.0
    steady_after_s: float | None = None  # load start -> every request decoding
    itl_split: dict | None = None  # the ITL of the recorded steps and of those after (toolkit.profile.window)


# -- the trace files (pure but for reading the directory) ------------------------------------------
def _traces(out_dir: Path) -> list[Path]:
    found: set[Path] = set()
    for g in TRACE_GLOBS:
        found.update(out_dir.rglob(g))
    return sorted(found)


def rank_files(paths: list[Path], rank: int, profile_id: str | None) -> list[Path]:
    """The files of TP rank `rank` (sglang's `...<id>-TP-<rank>[-DP-..][-PP-..][-EP-..][-STAGE].trace...`)."""
    out = []
    for p in paths:
        name = p.name
        if profile_id and profile_id not in name:
            continue
        tag = f"-TP-{rank}"
        i = name.find(tag)
        if i >= 0 and name[i + len(tag):i + len(tag) + 1] in ("-", "."):
            out.append(p)
    return out


def readable(path: Path) -> bool:
    """A trace file is complete: a gzip stream to its end marker (a .json: parses)."""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                while fh.read(1 << 20):
                    pass
        else:
            json.loads(path.read_bytes())
        return True
    except (OSError, EOFError, ValueError, zlib.error):
        return False


class TraceWatch:
    """Polls `out_dir` for one complete trace per expected TP rank. A file counts as complete once
    its size was the same at two polls and it reads to its end."""

    def __init__(self, out_dir: Path, ranks: int, profile_id: str | None):
        self.out_dir, self.ranks, self.profile_id = out_dir, max(1, ranks), profile_id
        self._sizes: dict[Path, int] = {}
        self._done: set[Path] = set()

    def poll(self) -> list[int]:
        """One look; returns the ranks still without a complete trace."""
        paths = _traces(self.out_dir)
        sizes = {}
        for p in paths:
            try:
                sizes[p] = p.stat().st_size
            except OSError:
                continue
        for p, size in sizes.items():
            if p not in self._done and size > 0 and self._sizes.get(p) == size and readable(p):
                self._done.add(p)
        self._sizes = sizes
        done = sorted(self._done)
        return [r for r in range(self.ranks) if not rank_files(done, r, self.profile_id)]

    def complete(self) -> list[Path]:
        done = sorted(self._done)
        return [p for r in range(self.ranks) for p in rank_files(done, r, self.profile_id)]

    def any(self) -> bool:
        return bool(_traces(self.out_dir))

    async def wait(self, timeout: float, until=None) -> list[int]:
        """Poll until every rank has its trace, `timeout` s pass, or `until()` is true; the ranks missing."""
        deadline = time.monotonic() + timeout
        while True:
            missing = self.poll()
            if not missing or time.monotonic() > deadline or (until is not None and until()):
                return missing
            await asyncio.sleep(POLL_S)


# -- talking to the server -------------------------------------------------------------------------
async def _post(session, url: str, body: dict | None, timeout: float) -> tuple[int, str]:
    import aiohttp

    try:
        async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            return resp.status, (await resp.text()).strip()
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        return 0, f"{type(exc).__name__}: {exc}"


async def _until_steady(inflight, load: asyncio.Task, concurrency: int, timeout: float) -> bool:
    steady = asyncio.ensure_future(inflight.wait_steady(concurrency, timeout))
    await asyncio.wait({steady, load}, return_when=asyncio.FIRST_COMPLETED)
    if not steady.done():
        steady.cancel()
        return False
    return steady.result()


async def _stop(session, base: str, watch: TraceWatch, cap: Capture, timeout: float) -> bool:
    """POST /stop_profile; True when it flushed (200). A refusal once traces exist is only a note."""
    status, text = await _post(session, base + "/stop_profile", None, timeout)
    if status == 200:
        return True
    if watch.any():
        cap.notes.append(f"/stop_profile answered {status} after the server wrote its traces (profiling had stopped)")
    else:
        cap.errors.append(f"/stop_profile answered {status}: {text[:300]}")
    return False


async def _capture(base: str, cfg, body: dict, steps: int, ranks: int, out_dir: Path, timeout: float,
                   log: Path | None, console, warmup: int = 0) -> Capture:
    import aiohttp

    from toolkit.run.bench.inflight import InFlight
    from toolkit.run.bench.serving import run_serving_async

    cap = Capture([], body)
    t0 = time.monotonic()
    inflight = InFlight()
    watch = TraceWatch(out_dir, ranks, body.get("profile_id"))
    target = cfg.concurrency[0]
    where = f"under {out_dir}" + (f" (server log: {log})" if log else "")
    load = asyncio.create_task(run_serving_async(base, cfg, inflight=inflight))
    async with aiohttp.ClientSession() as session:
        if not await _until_steady(inflight, load, target, min(STEADY_TIMEOUT_S, timeout)):
            cap.errors.append(f"the load never reached steady decode ({inflight.in_flight} of {target} requests in "
                              f"flight, {inflight.decoding} decoding, after {time.monotonic() - t0:.0f} s): not profiled")
        else:
            cap.steady_after_s = time.monotonic() - t0
            console.print(f"profiling {steps} steps at concurrency {target} (all {target} requests decoding "
                          f"after {cap.steady_after_s:.1f} s)")
            status, text = await _post(session, base + "/start_profile", body, timeout)
            started = time.perf_counter()  # the clock of the load's token arrivals
            if status != 200:
                cap.errors.append(f"/start_profile answered {status}: {text[:300]}")
            elif "num_steps" in body:
                missing = await watch.wait(timeout, until=load.done)
                if missing and load.done():  # no step came after the last one recorded: flush it
                    if await _stop(session, base, watch, cap, timeout) or watch.any():
                        missing = await watch.wait(timeout)  # a trace being written: let it finish
                if missing:
                    cap.errors.append(f"no complete trace for TP rank(s) {', '.join(map(str, missing))} {where} "
                                      f"after {time.monotonic() - t0:.0f} s")
            else:  # a server that does not stop by itself: let about `steps` steps pass, then stop
                mark = inflight.tokens
                while not load.done() and inflight.tokens - mark < steps * target:
                    await asyncio.sleep(POLL_S / 5)
                if await _stop(session, base, watch, cap, timeout) or watch.any():
                    missing = await watch.wait(timeout)
                else:
                    missing = watch.poll()
                if missing and not cap.errors:
                    cap.errors.append(f"no complete trace for TP rank(s) {', '.join(map(str, missing))} {where} "
                                      f"after /stop_profile")
    cap.points = await load
    if cap.steady_after_s is not None and "num_steps" in body and not cap.errors:
        cap.itl_split = window.split(inflight.arrivals, started, steps, warmup).to_dict()
    cap.traces = watch.complete()
    cap.seconds = time.monotonic() - t0
    for pt in cap.points:  # failed requests: the ITL beside the trace is not the load's
        cap.errors.extend(f"load: {e}" for e in pt.errors)
    return cap


def capture(base_url: str, cfg, body: dict, steps: int, out_dir: Path, *, timeout: float, console,
            ranks: int = 1, log: Path | None = None, warmup: int = 0) -> Capture:
    """Drive `cfg`'s load at one concurrency and record `steps` steps into `out_dir` (see module doc);
    `ranks` traces (one per TP rank) are expected; the first `warmup` of the steps are the profiler's
    start-up, left out of the ITL of the recorded steps as of the breakdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        return asyncio.run(_capture(base_url.rstrip("/"), cfg, body, steps, ranks, out_dir, timeout, log, console,
                                    warmup))
    except OSError as exc:
        raise PatchbenchError(f"profiling failed: {exc}") from None


def short_trace(ranks: list[dict], steps: int) -> str | None:
    """Why the traces hold fewer decode steps than asked (per rank), or None when they hold them all.
    A rank that ran only idle steps (DP attention with fewer requests than attention-DP groups) is
    not short: it had nothing to decode."""
    short = [f"rank {r['rank']}: {r['steps']}" for r in ranks if r["steps"] < steps and not r.get("idle_only")]
    if not short:
        return None
    return f"short trace: {', '.join(short)} decode step(s) of {steps} asked"
