"""The GPU acceptance script (benchmarks/gpu_check.py): on any CUDA GPU with torch, no network, < 5 min.

One PASS/FAIL line per check, exit 1 on any FAIL:
  torch         torch sees a CUDA GPU and a bf16 matmul runs on it
  serving       the miniature with its torch step on CUDA (`--mini-torch-step`), driven by patchbench's
                serving client with no failed request; its log says the step ran on cuda
  nvml series   NVML sampled over that window (toolkit.run.gpustate): non-empty, clocks > 0, temperature
                > 0, mean power <= the enforced limit, every reading <= 1.05x the limit
  profile       benchmarks/profile_gpu.py: a CUPTI trace of the torch step, classified into families
  doctor        `patchbench doctor --json` runs and sees the GPUs
  greedy        two launches answer the same greedy prompts with the same text

Needs an interpreter with a CUDA build of torch, nvidia-ml-py and patchbench's dependencies.

    python benchmarks/gpu_check.py [--skip-profile] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
MINI_PY = ROOT / "upstream" / "minisglang" / "python"
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Greedy decoding means"]


def _known(series: dict, field: str) -> list:
    return [v for v in series.get(field) or [] if v is not None]


def check_series(record: dict, *, power_slack: float = 1.05) -> tuple[bool, str]:
    """Is an NVML sampling record non-empty and consistent? (ok, detail). A reading NVML never gave
    is a FAIL naming it (and NVML's reason, from the record's "unread"), never a crash."""
    if not record.get("available"):
        return False, f"no GPU state: {record.get('reason')}"
    gpus = record.get("gpus") or []
    if not record.get("t") or not gpus:
        return False, "no reading"
    problems = []
    for g in gpus:
        s, why = g["series"], g.get("unread") or {}
        sm, mem, temp, power = (_known(s, f) for f in ("sm_mhz", "mem_mhz", "temp_c", "power_w"))
        limit = g.get("power_limit_w")

        def unread(field: str) -> str:
            return f" ({why[field]})" if field in why else ""

        if not sm or min(sm) <= 0 or not mem or min(mem) <= 0:
            problems.append(f"GPU {g['index']}: clocks missing or 0 (sm {sm[:3]}{unread('sm_mhz')}, "
                            f"mem {mem[:3]}{unread('mem_mhz')})")
        if not temp or min(temp) <= 0:
            problems.append(f"GPU {g['index']}: temperature missing or 0{unread('temp_c')}")
        if power and limit:
            mean = sum(power) / len(power)
            if mean > limit or max(power) > power_slack * limit:
                problems.append(f"GPU {g['index']}: power mean {mean:.0f} W / max {max(power):.0f} W over the {limit:.0f} W limit")
        elif not power:
            problems.append(f"GPU {g['index']}: no power reading{unread('power_w')}")
    if problems:
        return False, "; ".join(problems)
    g = gpus[0]["series"]
    sm, power = _known(g, "sm_mhz"), _known(g, "power_w")
    gaps = sum(len(x["series"]["sm_mhz"]) - len(_known(x["series"], "sm_mhz")) for x in gpus)
    return True, (f"{len(record['t'])} ticks x {len(gpus)} GPU(s); GPU {gpus[0]['index']}: SM {min(sm)}-{max(sm)} MHz, "
                  f"power max {max(power):.0f} W <= {gpus[0].get('power_limit_w')} W"
                  + (f"; {gaps} SM clock reading(s) missing" if gaps else ""))


def doctor_ok(out: str) -> tuple[bool, str]:
    """`doctor --json` output: versioned, with a `gpus` check that is ok."""
    try:
        data = json.loads(out)
    except ValueError:
        return False, f"not JSON: {out[:200]!r}"
    checks = {c["name"]: c for c in data.get("checks", [])}
    gpus = checks.get("gpus", {})
    lines = ", ".join(f"{c['name']} {c['status']}" for c in data.get("checks", []))
    return ("schema_version" in data and gpus.get("status") == "ok"), lines


class Mini:
    """The miniature server from source on a free port (its torch step on CUDA)."""

    def __init__(self, work: Path, name: str):
        from toolkit.run.server import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = work / f"{name}.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sglang.launch_server", "--model-path", "mini", "--port", str(self.port),
             "--mini-torch-step", "--random-seed", "0"], stdout=self.log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(MINI_PY)}, start_new_session=True)

    def __enter__(self) -> "Mini":
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode} (log {self.log_path})")
            try:
                with urllib.request.urlopen(self.url + "/health_generate", timeout=10) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError("server not ready in 180 s")

    def __exit__(self, *exc) -> None:
        try:
            os.killpg(self.proc.pid, 15)
        except ProcessLookupError:
            pass
        self.proc.wait(30)
        self.log.close()

    def greedy(self) -> list[str]:
        out = []
        for p in PROMPTS:
            body = json.dumps({"text": p, "sampling_params": {"temperature": 0, "max_new_tokens": 24}}).encode()
            req = urllib.request.Request(self.url + "/generate", data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                out.append(json.loads(r.read())["text"])
        return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--skip-profile", action="store_true")
    args = ap.parse_args(argv)
    results: list[tuple[str, bool, str]] = []

    def report(name: str, ok: bool, detail: str) -> None:
        results.append((name, ok, detail))
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)

    try:
        import torch

        ok = torch.cuda.is_available()
        if ok:
            x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
            ok = bool(torch.isfinite((x @ x).float()).all())
        report("torch", ok, f"torch {torch.__version__} (CUDA {torch.version.cuda}), "
                            f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA GPU'}")
    except ImportError:
        report("torch", False, "torch is not installed in this interpreter")
    if not results[-1][1]:
        return 1

    from toolkit.run.bench.serving import ServingConfig, run_serving
    from toolkit.run.gpustate.sampler import Sampler

    work = Path(tempfile.mkdtemp(prefix="patchbench-gpu-check-"))
    cfg = ServingConfig(input_len=64, output_len=128, concurrency=(args.concurrency,),
                        num_prompts=4 * args.concurrency, warmup=1)
    answers = []
    try:
        with Mini(work, "serving") as mini:
            sampler = Sampler(positions=[0]).start()  # the miniature's torch step runs on cuda:0
            try:
                points = run_serving(mini.url, cfg)
            finally:
                record = sampler.stop()
            answers.append(mini.greedy())
        errors = [e for p in points for e in p.errors]
        tok_s = next((s.value for p in points for s in p.to_samples() if s.metric == "output_tok_s"), 0.0)
        on_cuda = "on cuda" in mini.log_path.read_text(errors="replace")
        report("serving", not errors and on_cuda and tok_s > 0,
               f"{tok_s:.1f} tok/s at concurrency {args.concurrency}; torch step on cuda: {on_cuda}"
               + (f"; errors: {errors[:2]}" if errors else ""))
        report("nvml series", *check_series(record))
        (work / "gpu_state.json").write_text(json.dumps(record))
    except Exception as exc:  # noqa: BLE001 - a check that cannot run is a FAIL line, not a traceback
        report("serving", False, f"{type(exc).__name__}: {exc}")

    if not args.skip_profile:
        import profile_gpu

        try:
            rc = profile_gpu.main(["--steps", "10", "--concurrency", str(args.concurrency)])
            report("profile", rc == 0, f"benchmarks/profile_gpu.py exit {rc}")
        except SystemExit as exc:
            report("profile", False, f"benchmarks/profile_gpu.py: {exc}")

    proc = subprocess.run([sys.executable, "-m", "toolkit", "doctor", "--json"], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    ok, detail = doctor_ok(proc.stdout)
    report("doctor", ok, f"exit {proc.returncode}; {detail}" + (f"; {proc.stderr.strip()[-200:]}" if not ok else ""))

    try:
        with Mini(work, "greedy2") as mini:
            answers.append(mini.greedy())
        same = len(answers) == 2 and answers[0] == answers[1]
        report("greedy", same, f"{len(PROMPTS)} prompts, two launches: " + ("same answers" if same else
                                                                            f"differ: {answers}"))
    except Exception as exc:  # noqa: BLE001
        report("greedy", False, f"{type(exc).__name__}: {exc}")
    print(f"logs and gpu_state.json: {work}")
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
