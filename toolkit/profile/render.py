"""What `patchbench profile` prints: per rank, time per family per decode step beside its floor,
largest gap first, then the step-time check (families + idle vs the trace's step vs the ITL)."""

from __future__ import annotations

from rich.table import Table

from toolkit.profile.families import IDLE, labels as family_labels
from toolkit.profile.floors import FloorSpec, component_floors_ms, family_floors_ms
from toolkit.roofline.beyond import INPUTS_WRONG, beyond_roofline


def floor_lines(families, rank: dict, spec: FloorSpec | None) -> list[dict]:
    """Rows (family, label, ms, share, count, floor_ms, pct_of_floor) sorted by gap (ms - floor)."""
    fam_ms = rank["family_ms"]
    floors: dict = {}
    if spec is not None:
        floors = family_floors_ms(families, component_floors_ms(spec), set(fam_ms))
    names = family_labels(families)
    step = rank["step_ms"] or 1.0
    rows = []
    for fam, ms in fam_ms.items():
        floor = floors.get(fam)
        rows.append({"family": fam, "label": names.get(fam, fam), "ms": ms, "share": ms / step,
                     "count": rank["counts_per_step"].get(fam, 0.0), "floor_ms": floor,
                     "pct_of_floor": (100 * floor / ms) if floor is not None and ms else None,
                     "beyond": floor is not None and bool(ms) and beyond_roofline(floor / ms),
                     "shapes": rank.get("shapes", {}).get(fam, {})})
    rows.sort(key=lambda r: -(r["ms"] - (r["floor_ms"] or 0.0)))
    return rows


def step_check(rank: dict, itl_ms: float | None) -> dict:
    fam_sum = sum(rank["family_ms"].values()) - rank.get("overlap_ms", 0.0)
    step = rank["step_ms"]
    out = {"families_sum_ms": fam_sum, "trace_step_ms": step,
           "sum_vs_step": (fam_sum / step - 1) if step else None, "itl_ms_median": itl_ms,
           "step_vs_itl": (step / itl_ms - 1) if step and itl_ms else None}
    return out


def itl_window_line(step_ms: float, split: dict | None) -> str | None:
    """The ITL of the recorded steps against the trace step (does the trace cover the step?) and
    against the steps after it (what the profiler costs a step); toolkit.profile.window."""
    if not split or split.get("itl_profiled_ms") is None:
        return None
    inside = split["itl_profiled_ms"]
    if inside <= 0:
        # most of the recorded steps' tokens came in one read with an earlier step's: the client lagged
        # the server (a busy host), so their gaps are 0 and say nothing of the step
        return (f"ITL of the recorded steps: median 0 ms over {split['profiled_tokens']} tokens (the load "
                f"generator read most of them in bursts: a busy host); no step-time check against it")
    line = (f"ITL of the recorded steps {inside:.2f} ms (median of {split['profiled_tokens']} tokens): trace step "
            f"{100 * (step_ms / inside - 1):+.1f}% vs it")
    if split.get("itl_after_ms"):
        over = split["profiler_overhead"]
        line += f"; after the trace {split['itl_after_ms']:.2f} ms ({split['after_tokens']} tokens): "
        line += (f"the profiler made a step {100 * over:+.1f}% slower" if over >= 0 else
                 f"the recorded steps were {100 * -over:.1f}% faster than the later ones (no profiler cost "
                 f"seen: the load or the host changed between them)")
    else:
        line += "; no step after the trace to tell the profiler's overhead (raise the load's output length)"
    return line


def sentence(row: dict) -> str:
    if row["floor_ms"] is None:
        return f"{row['label']} {row['ms']:.2f} ms (no roofline floor)"
    if row["beyond"]:
        return f"{row['label']} {row['ms']:.2f} ms, below its floor {row['floor_ms']:.3f} ms: {INPUTS_WRONG}"
    if not row["floor_ms"]:  # e.g. an all-reduce at TP1: the roofline needs none of this time
        return f"{row['label']} {row['ms']:.2f} ms with a zero floor (the layout needs none of it)"
    return f"{row['label']} {row['ms']:.2f} ms vs floor {row['floor_ms']:.3f} ms: {row['pct_of_floor']:.1f}%"


def _pct(row: dict) -> str:
    if row["pct_of_floor"] is None:
        return "-"
    if not row["floor_ms"] and not row["beyond"]:
        return "zero floor"
    return "beyond the floor: inputs wrong" if row["beyond"] else f"{row['pct_of_floor']:.1f}%"


def render(recipe: str, families, summary: dict, spec: FloorSpec | None) -> list:
    out: list = []
    for rank in summary["ranks"]:
        if rank.get("idle_only"):
            out.append(f"{recipe}: rank {rank['rank']} ran only idle steps (DP attention with fewer requests than "
                       "attention-DP groups): nothing to break down")
            continue
        rows = floor_lines(families, rank, spec)
        what = ("target VERIFY steps (speculative decoding; the draft's steps apart)" if rank.get("stage") == "VERIFY"
                else "decode steps")
        t = Table(title=f"{recipe}: rank {rank['rank']}, {rank['steps']} {what} "
                        f"(batch {','.join(map(str, rank['batches']))}), {rank['mode'].upper()} trace",
                  title_justify="left")
        for col in ("family", "ms/step", "share", "kernels/step", "roofline floor", "floor/measured", "shapes (top)"):
            t.add_column(col, overflow="fold")
        for r in rows:
            shapes = "; ".join(list(r["shapes"])[:1])
            t.add_row(r["label"], f"{r['ms']:.3f}", f"{100 * r['share']:.1f}%",
                      "" if r["family"] == IDLE else f"{r['count']:.1f}",
                      "-" if r["floor_ms"] is None else f"{r['floor_ms']:.3f} ms",
                      _pct(r), shapes[:60])
        out.append(t)
        c = step_check(rank, summary.get("itl_ms_median"))
        line = (f"sum of families (idle included) {c['families_sum_ms']:.2f} ms vs trace step "
                f"{c['trace_step_ms']:.2f} ms ({100 * (c['sum_vs_step'] or 0):+.1f}%)")
        if c["itl_ms_median"]:
            line += (f"; benchmark ITL (median, same load) {c['itl_ms_median']:.2f} ms: trace step "
                     f"{100 * c['step_vs_itl']:+.1f}% vs ITL")
        out.append(line)
        if rank.get("warmup_ms"):
            out.append(f"first recorded step left out (the profiler's start-up): "
                       f"{', '.join(f'{ms:.2f}' for ms in rank['warmup_ms'])} ms, against {c['trace_step_ms']:.2f} ms "
                       f"a step over the {rank['steps']} kept")
        window_line = itl_window_line(c["trace_step_ms"], summary.get("itl_split"))
        if window_line:
            out.append(window_line)
        gaps = [sentence(r) for r in rows if r["floor_ms"] is not None and not r["beyond"]][:3]
        if gaps:
            out.append("largest gaps: " + "; ".join(gaps))
        out += [f"[!] {sentence(r)}" for r in rows if r["beyond"]]
    if spec is not None:
        out.append(f"floors: {spec.text()} (toolkit.roofline)")
    else:
        out.append("floors: the recipe has no [roofline] model and gpu; measured times only")
    return out


def kernel_compare(store, recipes: list[str]) -> tuple[list, dict]:
    """`compare A B --kernels`: printable items and a JSON-able dict (each variant against the first)."""
    from toolkit.errors import BadInput
    from toolkit.profile.diff import kernel_diff, legend, step_ms
    from toolkit.profile.session import stored_profiles

    profiles = {r: stored_profiles(store, r) for r in recipes}
    missing = [r for r, p in profiles.items() if not p]
    if missing:
        raise BadInput(f"no stored profile for {', '.join(missing)}", hint=f"run `patchbench profile {missing[0]}` first")
    base = recipes[0]
    items: list = []
    data: dict = {}
    for other in recipes[1:]:
        diffs = kernel_diff(profiles[base], profiles[other])
        t = Table(title=f"kernel families: {other} against {base} (ms per decode step; "
                        f"{len(profiles[base])} vs {len(profiles[other])} profiles)", title_justify="left")
        for col in ("family", base, other, "change", "spread", "p", "verdict"):
            t.add_column(col, overflow="fold")
        for d in diffs:
            style = {"faster": "green", "slower": "red"}.get(d.verdict, "dim")
            t.add_row(d.family, f"{d.a_ms:.3f}", f"{d.b_ms:.3f}",
                      f"{d.delta_ms:+.3f} ms" + (f" ({100 * (d.ratio - 1):+.1f}%)" if d.ratio else ""),
                      f"±{d.spread_ms:.3f}", "-" if d.p_value is None else f"{d.p_value:.2g}",
                      f"[{style}]{d.verdict}[/]")
        items.append(t)
        items.append(f"[dim]{legend()}[/]")
        a_step, b_step = step_ms(profiles[base]), step_ms(profiles[other])
        items.append(f"mean trace step (contention included): {a_step:.2f} ms -> {b_step:.2f} ms ({100 * (b_step / a_step - 1):+.1f}%)"
                     if a_step else "trace step: no decode steps")
        data[other] = [{**d.__dict__, "delta_ms": d.delta_ms, "verdict": d.verdict} for d in diffs]
    return items, {"baseline": base, "variants": data}


def bar_data(store, recipes: list[str], families) -> tuple[dict, dict]:
    """Inputs of figure.stacked_bar from the store: recipe -> mean ms per family over its ok
    profiles (rank 0), and recipe -> the step's roofline floor (sum of its families' floors) when
    the recipe names a [roofline] model and GPU. Recipes without a profile are left out."""
    from toolkit.profile.floors import floor_spec
    from toolkit.profile.session import BENCH_DRIVER

    bars, floors = {}, {}
    for name in recipes:
        runs = [r for r in store.runs(recipe=name, status="ok")
                if r.bench_driver == BENCH_DRIVER and r.extra.get("profile", {}).get("ranks")]
        if not runs:
            continue
        ranks = [r.extra["profile"]["ranks"][0] for r in runs]
        fams = {f for rk in ranks for f in rk["family_ms"]}
        bars[name] = {f: sum(rk["family_ms"].get(f, 0.0) for rk in ranks) / len(ranks) for f in fams}
        spec = floor_spec(runs[-1].recipe_resolved, int(runs[-1].extra["profile"].get("concurrency", 1)),
                          runs[-1].server_info)
        if spec is not None:
            per_family = family_floors_ms(families, component_floors_ms(spec), fams)
            floors[name] = sum(v for v in per_family.values() if v)
    return bars, floors
