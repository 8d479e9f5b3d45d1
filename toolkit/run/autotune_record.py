"""Which tactics FlashInfer's autotuner chose in one launch, kept with the run.

sglang 0.5.23 tunes FlashInfer's kernels at start on a CUDA box (MoE runners flashinfer_cutlass,
_trtllm, _cutedsl ..., FP4/FP8 GEMMs: model_executor/runner/flashinfer_autotune.py). With
`SGLANG_FLASHINFER_AUTOTUNE_CACHE=0` (every patchbench launch: toolkit.run.launch_env) each tuning
pass writes its winners to a fresh file and logs, on each rank:

    Running FlashInfer autotune (cache reuse DISABLED via SGLANG_FLASHINFER_AUTOTUNE_CACHE=0); writing fresh result to: PATH

and with reuse on (a recipe's `[server.env]`), "Running FlashInfer autotune with cache: PATH" (a file
that also holds earlier launches' winners). The file is FlashInfer's AutoTuner.save_configs JSON:
`"(custom_op, runner class, tuned shapes, extras)": [runner class, tactic, (policy)]` plus
`_metadata` (versions, GPU). A launch may tune twice (decode shapes, then sglang's prefill pass).

`collect` copies the files a launch's log names into the run directory (`autotune/`) and returns
what the run stores (`extra["autotune"]`): one choice per tuned (op, shapes, extras), rank 0's (the
ranks are synced by sglang), and whether the ranks agree. On a CPU box nothing is tuned: None.
toolkit.analysis.tactics compares them across runs.

Effects: reads the files the log names, writes copies under `run_dir/autotune/`.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

FRESH = re.compile(r"writing fresh result to: (\S+\.json)")
REUSED = re.compile(r"Running FlashInfer autotune with cache: (\S+\.json)")
RANK = re.compile(r"rank_tp(\d+)_pp(\d+)_dp(\d+)")
DIR = "autotune"


def logged_files(log_text: str) -> tuple[str, list[Path]]:
    """("fresh" | "reused", the result files the log names, in log order, each once)."""
    fresh = list(dict.fromkeys(FRESH.findall(log_text)))
    if fresh:
        return "fresh", [Path(p) for p in fresh]
    return "reused", [Path(p) for p in dict.fromkeys(REUSED.findall(log_text))]


def parse(text: str) -> dict[tuple, list]:
    """{(op, runner, shapes, extras): [runner, tactic, ...]} of one save_configs file (keys that do
    not read as FlashInfer's tuple are kept as (key,))."""
    data = json.loads(text)
    out = {}
    for key, value in data.items():
        if key.startswith("_") or not isinstance(value, list):
            continue
        try:
            parsed = ast.literal_eval(key)
        except (ValueError, SyntaxError):
            parsed = (key,)
        out[parsed if isinstance(parsed, tuple) else (key,)] = value
    return out


def _rank(path: Path) -> tuple[int, int, int]:
    m = RANK.search(path.name)
    return tuple(int(x) for x in m.groups()) if m else (1 << 30, 0, 0)


def choice(key: tuple, value: list) -> dict:
    """One stored choice: the op, the tuned shapes, the runner and its tactic."""
    op, runner, shapes, extras = (*key, None, None, None)[:4]
    return {"op": str(op), "runner": value[0] if value else runner, "shapes": _jsonable(shapes),
            "extras": _jsonable(extras), "tactic": _jsonable(value[1]) if len(value) > 1 else None}


def _jsonable(x):
    if isinstance(x, (tuple, list)):
        return [_jsonable(v) for v in x]
    return x if x is None or isinstance(x, (int, float, str, bool)) else repr(x)


def collect(log_text: str, run_dir: Path) -> dict | None:
    """What the run stores of its launch's tuning (module docstring), or None when the log names no
    result file. Files the log names but that are gone are listed under "missing"."""
    mode, files = logged_files(log_text)
    if not files:
        return None
    dest = Path(run_dir) / DIR
    dest.mkdir(parents=True, exist_ok=True)
    per_rank: dict[tuple, dict] = {}
    kept, missing = [], []
    for path in files:
        try:
            text = path.read_text()
            entries = parse(text)
        except (OSError, ValueError) as exc:
            missing.append(f"{path}: {exc}")
            continue
        copy = dest / f"{len(kept):02d}-{path.name}"
        shutil.copyfile(path, copy)
        kept.append(str(copy.relative_to(run_dir)))
        per_rank.setdefault(_rank(path), {}).update(entries)  # a later pass overlays an earlier one
    if not per_rank:
        return {"mode": mode, "files": [], "missing": missing, "choices": [], "ranks": 0, "ranks_agree": None}
    ranks = sorted(per_rank)
    first = per_rank[ranks[0]]
    agree = all(per_rank[r] == first for r in ranks[1:])
    choices = [choice(k, v) for k, v in sorted(first.items(), key=lambda kv: repr(kv[0]))]
    return {"mode": mode, "files": kept, "missing": missing, "choices": choices, "ranks": len(ranks),
            "ranks_agree": agree}
