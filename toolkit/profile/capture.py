"""The effects of `patchbench profile`: ask the env which ProfileReq fields it takes, drive a steady
decode load, record N steps through /start_profile (+ /stop_profile), collect the trace files."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import PatchbenchError
from toolkit.resources import PROBES_DIR

PROBE = PROBES_DIR / "profile_req.py"
# sglang 0.5.23's ProfileReq (managers/io_struct.py); older releases accept a subset.
PROFILE_FIELDS_0523 = ("output_dir", "start_step", "num_steps", "activities", "profile_by_stage", "with_stack",
                       "record_shapes", "profile_id", "merge_profiles", "profile_prefix")
OLDEST_FIELDS = ("output_dir", "num_steps", "activities")
TRACE_GLOBS = ("*.trace.json.gz", "*.trace.json", "*.pt.trace.json*")


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
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


async def _post(session, url: str, body: dict | None, timeout: float) -> tuple[int, str]:
    import aiohttp

    async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
        return resp.status, (await resp.text()).strip()


async def _running(session, base: str) -> int | None:
    from toolkit.run.bench.serving import probe_server

    info = await probe_server(session, base)
    states = info.get("internal_states") or [{}]
    value = states[0].get("#running-req") if isinstance(states, list) and states else None
    return int(value) if isinstance(value, (int, float)) else None


async def _capture(base: str, cfg, body: dict, steps: int, out_dir: Path, timeout: float, console) -> Capture:
    import aiohttp

    from toolkit.run.bench.serving import run_serving_async

    cap = Capture([], body)
    t0 = time.monotonic()
    load = asyncio.create_task(run_serving_async(base, cfg))
    async with aiohttp.ClientSession() as session:
        # Steady decode: wait (bounded) until the server runs the whole concurrency.
        target = cfg.concurrency[0]
        deadline = time.monotonic() + min(60.0, timeout)
        while time.monotonic() < deadline and not load.done():
            running = await _running(session, base)
            if running is None or running >= target:
                break
            await asyncio.sleep(0.05)
        console.print(f"profiling {steps} steps at concurrency {target}")
        try:
            status, text = await _post(session, base + "/start_profile", body, timeout)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            status, text = 0, f"{type(exc).__name__}: {exc}"
        if status != 200:
            cap.errors.append(f"/start_profile answered {status}: {text[:300]}")
        elif not _traces(out_dir):  # an sglang that does not stop by itself after num_steps
            await _wait_steps(session, base, steps)
            status, text = await _post(session, base + "/stop_profile", None, timeout)
            if status != 200:
                cap.errors.append(f"/stop_profile answered {status}: {text[:300]}")
    cap.points = await load
    cap.traces = await _settled_traces(out_dir, timeout=30.0)
    cap.seconds = time.monotonic() - t0
    if not cap.traces and not cap.errors:
        cap.errors.append(f"the server wrote no trace under {out_dir}")
    for pt in cap.points:
        cap.errors.extend(f"load: {e}" for e in pt.errors)
    return cap


async def _wait_steps(session, base: str, steps: int) -> None:
    """Without num_steps support: let about `steps` decode steps pass (a bounded wait on the server)."""
    await asyncio.sleep(0.1 * steps)


def _traces(out_dir: Path) -> list[Path]:
    found: set[Path] = set()
    for g in TRACE_GLOBS:
        found.update(out_dir.rglob(g))
    return sorted(found)


async def _settled_traces(out_dir: Path, timeout: float) -> list[Path]:
    """Trace files once their sizes stop changing (sglang writes them after answering /stop_profile)."""
    deadline = time.monotonic() + timeout
    last: dict = {}
    while True:
        now = {p: p.stat().st_size for p in _traces(out_dir)}
        if now and now == last or time.monotonic() > deadline:
            return sorted(now)
        last = now
        await asyncio.sleep(0.2)


def capture(base_url: str, cfg, body: dict, steps: int, out_dir: Path, *, timeout: float, console) -> Capture:
    """Drive `cfg`'s load at one concurrency and record `steps` steps into `out_dir` (see module doc)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        return asyncio.run(_capture(base_url.rstrip("/"), cfg, body, steps, out_dir, timeout, console))
    except OSError as exc:
        raise PatchbenchError(f"profiling failed: {exc}") from None
