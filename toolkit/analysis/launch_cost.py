"""What launches cost: seconds from launch to ready plus the benchmark's, times the recipe's GPUs
(toolkit.run.parallel_layout.gpu_count), from the timings every stored run keeps (`RunRow.timings`: step ->
seconds, written by toolkit/run/pipeline.py). Pure: stored rows and recipes in, figures out."""

from __future__ import annotations

from typing import Mapping, Sequence

from toolkit.errors import BadInput
from toolkit.recipe.load import Recipe
from toolkit.results.records import RunRow
from toolkit.run.parallel_layout import gpu_count

# a launch's time on the GPUs: the pipeline's measure steps (toolkit/run/pipeline.py STEPS, by step_name)
MEASURE_STEPS = ("launch", "verify", "benchmark", "quality", "jit-arch", "evidence")


def gpus_of(args: Mapping) -> int:
    """The GPUs one launch holds, from the server args (toolkit.run.parallel_layout.gpu_count: tp x pp
    per DP replica, attention DP within tp); 1 when the args do not parse (the recipe check refuses them)."""
    try:
        return max(gpu_count(args), 1)
    except BadInput:
        return 1


def gpus_held(recipe) -> int:
    """The GPUs one launch of a recipe holds for its cost: none for a recipe that runs without a GPU
    (`[server] gpus = 0`: the miniature, the CPU tier), else its layout's (gpus_of)."""
    return 0 if getattr(recipe.server, "gpus", None) == 0 else gpus_of(recipe.server.args)


def launch_seconds(run: RunRow) -> float:
    """Launch to ready plus benchmark (and the checks in the same launch), in seconds."""
    return float(sum(float((run.timings or {}).get(k, 0.0) or 0.0) for k in MEASURE_STEPS))


def cost(launched: Sequence[RunRow], used: Sequence[RunRow], recipes: Mapping[str, Recipe]) -> dict:
    """{"launches", "seconds", "gpu_minutes", "stored_launches", "stored_seconds", "stored_gpu_minutes",
    "fixed_launches", "fixed_seconds", "fixed_gpu_minutes", "per_recipe"}: what `launched` cost, what the
    runs used that this call did not launch cost (`stored_*`: a killed call's launches a resumed sweep reads,
    or an earlier call's), and what the fixed design (each recipe's `[benchmark] repeats`) would have, at
    the mean launch time of the runs used (`used`, else `launched`)."""
    out = {"launches": 0, "seconds": 0.0, "gpu_minutes": 0.0, "stored_launches": 0, "stored_seconds": 0.0,
           "stored_gpu_minutes": 0.0, "fixed_launches": 0, "fixed_seconds": 0.0, "fixed_gpu_minutes": 0.0,
           "per_recipe": {}}
    now = {r.run_id for r in launched}
    for name, recipe in recipes.items():
        gpus = gpus_held(recipe)
        mine = [r for r in launched if r.recipe == name]
        basis = [r for r in used if r.recipe == name] or mine
        stored = [r for r in used if r.recipe == name and r.run_id not in now]
        seconds = sum(launch_seconds(r) for r in mine)
        earlier = sum(launch_seconds(r) for r in stored)
        mean = sum(launch_seconds(r) for r in basis) / len(basis) if basis else 0.0
        repeats = recipe.benchmark.repeats
        row = {"launches": len(mine), "seconds": round(seconds, 1), "gpus": gpus,
               "gpu_minutes": round(seconds * gpus / 60.0, 2), "stored_launches": len(stored),
               "stored_seconds": round(earlier, 1), "stored_gpu_minutes": round(earlier * gpus / 60.0, 2),
               "fixed_launches": repeats, "fixed_seconds": round(repeats * mean, 1),
               "fixed_gpu_minutes": round(repeats * mean * gpus / 60.0, 2)}
        out["per_recipe"][name] = row
        for k in ("launches", "seconds", "gpu_minutes", "stored_launches", "stored_seconds", "stored_gpu_minutes",
                  "fixed_launches", "fixed_seconds", "fixed_gpu_minutes"):
            out[k] += row[k]
    for k in ("seconds", "gpu_minutes", "stored_seconds", "stored_gpu_minutes", "fixed_seconds", "fixed_gpu_minutes"):
        out[k] = round(out[k], 2)
    return out


def describe(c: dict) -> str:
    """"cost: 4 launches, 3.5 min, 0.21 GPU-min (launch + benchmark); the fixed design: 8 launches, ~7.0 min,
    ~0.42 GPU-min"; launches that held no GPU (every recipe `[server] gpus = 0`) are costed in minutes
    alone, never as "0.00 GPU-min"."""
    gpus = any(row.get("gpus") for row in c.get("per_recipe", {}).values())
    fixed_gpu = f", ~{c['fixed_gpu_minutes']:.2f} GPU-min" if gpus else ""
    k = c.get("stored_launches") or 0
    if not c["launches"]:
        stored = f": {k} stored launches, {c['stored_seconds'] / 60:.1f} min" if k else ""
        return (f"cost: nothing launched (the stored runs of these configurations decided it{stored}); the fixed "
                f"design (each recipe's [benchmark] repeats) would have launched {c['fixed_launches']}, ~"
                f"{c['fixed_seconds'] / 60:.1f} min{fixed_gpu}" + ("" if gpus else " (no GPU held)"))
    how = ("launch to ready + benchmark, x each recipe's tp x dp; none for [server] gpus = 0" if gpus
           else "launch to ready + benchmark; no GPU held: [server] gpus = 0")
    gpu = f", {c['gpu_minutes']:.2f} GPU-min" if gpus else ""
    # a resumed sweep: the verdicts read launches an earlier (killed) call made too; the fixed design is
    # compared with every launch they read, never with this call's share alone
    stored = "" if not k else (
        f"; the verdicts also read {k} stored launches of an earlier call ({c['stored_seconds'] / 60:.1f} min): "
        f"{c['launches'] + k} launches, {(c['seconds'] + c['stored_seconds']) / 60:.1f} min"
        + (f", {c['gpu_minutes'] + c['stored_gpu_minutes']:.2f} GPU-min" if gpus else "") + " in all")
    return (f"cost: {c['launches']} launches, {c['seconds'] / 60:.1f} min{gpu} ({how}){stored}; the fixed design "
            f"(each recipe's [benchmark] repeats): {c['fixed_launches']} launches, ~{c['fixed_seconds'] / 60:.1f} min"
            f"{fixed_gpu}")
