"""`patchbench profile RECIPE`: prepare and launch like `run`, verify /server_info, profile N decode
steps under a steady load, analyse the traces, store the run (traces in its log_paths and extra).

A profile run is checked as a benchmark run is: /server_info against the static check and
`[expect]` (toolkit.run.sglang_args.server_info_problems, as the pipeline's verify step) before
profiling, the patches' activation evidence (toolkit.run.evidence) after; a failed check stores
the run `invalid` with the reason. Its extra says `"kind": "profile"`: a profile runs under the
profiler's overhead, so it is never one of a recipe's benchmark runs."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from toolkit.run import evidence, jit_check, machine, server as srv
from toolkit.run.gpustate.owners import tree_of
from toolkit.errors import NoGPU, PatchbenchError
from toolkit.profile.breakdown import breakdown, decode_stage, idle_only
from toolkit.profile.capture import accepted_fields, capture, profile_body, short_trace
from toolkit.profile.families import load_families
from toolkit.profile.trace import load_trace
from toolkit.recipe.load import Recipe

BENCH_DRIVER = "profile"
KIND = "profile"  # extra["kind"]: not a benchmark run


@dataclass
class ProfileRun:
    run_id: str
    status: str
    summary: dict  # what extra["profile"] holds
    error: str | None = None  # why the run is not ok (invalid: a check failed)


# recorded before the steps asked and left out of the breakdown: torch's profiler pays its start-up in the
# first step it traces (toolkit.profile.breakdown)
WARMUP_STEPS = 1


def _serving_config(recipe: Recipe, concurrency: int, steps: int):
    from toolkit.run.bench.serving import ServingConfig
    from toolkit.run.bench.workload import model_vocab

    b = recipe.benchmark
    # room after the recorded steps for the ITL that tells the profiler's overhead, also on a loaded box
    return ServingConfig(input_len=b.input_len, output_len=max(b.output_len, 3 * steps + 64),
                         concurrency=(concurrency,), num_prompts=2 * concurrency, warmup=0, seed=b.seed,
                         endpoint=b.endpoint, timeout_s=b.timeout_s, vocab_size=model_vocab(recipe.server.model))


def capture_status(traces: bool, short: str | None, errors: list[str], trace_dir: Path) -> tuple[str, str | None]:
    """(status, error) of a profile run from its capture: no trace is `failed`; traces written are never
    `failed`: fewer decode steps than asked (or a capture error beside them) is `invalid`, saying why."""
    if not traces:
        return "failed", "; ".join(errors[:3]) or f"the server wrote no trace under {trace_dir}"
    if short or errors:
        return "invalid", "; ".join(([short] if short else []) + errors[:2])
    return "ok", None


def _tp_ranks(info: dict, recipe: Recipe) -> int:
    """How many TP ranks write a trace: /server_info's tp_size (the recipe's when absent)."""
    tp = info.get("tp_size")
    if not isinstance(tp, int):
        args = dict(recipe.server.args)
        tp = args.get("tp-size", args.get("tp", 1))
    try:
        return max(1, int(tp))
    except (TypeError, ValueError):
        return 1


def summarize(traces: list[Path], families, itl_ms: float | None, warmup: int = WARMUP_STEPS) -> dict:
    """Per-rank breakdowns of the traces, as stored in the run's extra["profile"] (the first `warmup`
    recorded steps of each rank left out: the profiler's start-up, toolkit.profile.breakdown)."""
    ranks = []
    for p in traces:
        trace = load_trace(p)
        rank = breakdown(trace, families, decode_stage(trace), warmup=warmup).to_dict()
        rank["idle_only"] = idle_only(trace)
        ranks.append(rank)
    return {"ranks": sorted(ranks, key=lambda r: r["rank"]), "itl_ms_median": itl_ms}


def profile_recipe(recipe: Recipe, *, home: Path, store, concurrency: int, steps: int,
                   families_file: str | None = None, frozen: bool = False,
                   console: Console | None = None, strict: bool = False) -> ProfileRun:
    from toolkit.run.pipeline import needs_gpu, prepare
    from toolkit.run.sglang_args import check_record, launch_argv, server_info_problems
    from toolkit.run.launch_env import launch_environ, record as launch_env_record, scratch_dir

    console = console or Console(stderr=True)
    families = load_families(families_file)
    p = prepare(recipe, home, frozen=frozen, console=console, strict=strict)
    gpu = needs_gpu(recipe)
    if gpu and not machine.has_cuda_gpu():
        raise NoGPU(f"no CUDA GPU on this machine: {recipe.name} built and passed the static check; "
                    "profiling it needs the GPU it runs on", step="launch")
    run_id = uuid.uuid4().hex
    run_dir = home / "runs" / run_id
    started = time.time()  # what this launch wrote in the JIT cache (toolkit.run.jit_check)
    environ = launch_environ(p.env.run_environ(), recipe.server.env, run_dir)
    accepted, source = accepted_fields(p.env.python, environ)
    trace_dir = run_dir / "profile"
    server_log = run_dir / "server.log"
    host = recipe.server.host
    argv = launch_argv(recipe.server, host=host, port=recipe.server.port or 0)  # 0: picked at launch (launch_ready)
    recorded = steps + WARMUP_STEPS  # the first is the profiler's start-up, left out of the breakdown
    cfg = _serving_config(recipe, concurrency, recorded)
    body = profile_body(accepted, output_dir=str(trace_dir), num_steps=recorded, profile_id=run_id[:12], gpu=gpu)
    extra = {"kind": KIND, "profile_request": body, "profile_fields_from": source,
             "patches": {t.source: list(t.patches) for t in p.trees},
             "target": p.check.target if p.check else None, "launch_env": launch_env_record(environ, recipe.server.env),
             **check_record(p.check)}
    store.begin_run(
        run_id=run_id, recipe=recipe.name, recipe_resolved=recipe.to_dict(),
        tree_hashes={t.source: t.tree_hash for t in p.trees}, env_key=p.env.key,
        sglang_version=p.check.version if p.check else None, arch_list=list(recipe.build.arch),
        bench_driver=BENCH_DRIVER, bench_params={**cfg.to_dict(), "steps": steps},
        server_argv=["-m", "sglang.launch_server", *argv], machine=machine.provenance(),
        env_vars=dict(recipe.server.env), group_id=uuid.uuid4().hex[:12],
        log_paths={"server": str(server_log), "run_dir": str(run_dir), "profile_dir": str(trace_dir)},
        extra=extra,
    )
    timings = dict(p.timings)
    info: dict = {}
    try:
        def again(exc: srv.PortTaken) -> None:
            console.print(f"[yellow]{escape(recipe.name)}: {escape(exc.message)}; launching again on another port[/]")

        server = srv.launch_ready(p.env.python, lambda port: launch_argv(recipe.server, host=host, port=port),
                                  host=host, port=recipe.server.port, log=server_log, environ=environ,
                                  timeout_s=recipe.server.timeout_s, retrying=again, scratch=scratch_dir(run_dir))
        with server:
            timings["launch"] = time.monotonic() - server.started
            argv = server.argv[3:]  # the port it bound: another than the first pick after a race for it
            info = server.server_info()
            problems = server_info_problems(p.check, dict(recipe.expect), info)
            if problems:
                error = "effective config differs: " + "; ".join(problems)
                store.finish_run(run_id, "invalid", error=error, server_info=info, config_verified=False,
                                 server_argv=["-m", "sglang.launch_server", *argv],
                                 verification=problems, timings=timings, extra=extra)
                return ProfileRun(run_id, "invalid", {}, error)
            console.print(f"[bold]{escape(recipe.name)}[/]: server ready in {timings['launch']:.1f} s; "
                          f"/start_profile fields from {source}")
            t0 = time.monotonic()
            cap = capture(server.url, cfg, body, recorded, trace_dir, timeout=recipe.benchmark.timeout_s,
                          console=console, ranks=_tp_ranks(info, recipe), log=server_log, warmup=WARMUP_STEPS)
            timings["profile"] = time.monotonic() - t0
            server.check_alive()
            jit = jit_check.inspect(recipe, p.env, home, run_dir, started, tree_of(server.proc.pid))  # as declared?
    except srv.ServerFailed as exc:
        store.finish_run(run_id, "failed", error=str(exc.message), log_tail=exc.tail, server_info=info,
                         timings=timings)
        raise
    samples = [s for pt in cap.points for s in pt.to_samples()]
    itl = next((s.value for s in samples if s.metric == "itl_ms_median"), None)
    summary = summarize(cap.traces, families, itl) if cap.traces else {"ranks": [], "itl_ms_median": itl}
    short = short_trace(summary["ranks"], steps) if cap.traces else None
    summary.update(traces=[str(t) for t in cap.traces], steps=steps, concurrency=concurrency, short=short,
                   steady_after_s=cap.steady_after_s, notes=cap.notes, itl_split=cap.itl_split)
    status, error = capture_status(bool(cap.traces), short, cap.errors, trace_dir)
    verdict = evidence.check_evidence([n for t in p.trees for n in t.patches], recipe.evidence,
                                      server_log.read_text(errors="replace") if server_log.exists() else "", info)
    extra.update(profile=summary, **evidence.run_extra(verdict, argv, info))
    verification = ["/server_info matches expectations"]
    if status == "ok" and not verdict.ok:
        status, error = "invalid", "activation evidence missing: " + "; ".join(verdict.problems)
        verification += verdict.problems
    extra["flashinfer_jit"] = jit
    if status == "ok" and jit["problems"]:
        status, error = "invalid", jit["problems"][0]
        verification += jit["problems"]
    store.finish_run(run_id, status, samples=samples, server_info=info, config_verified=True, timings=timings,
                     server_argv=["-m", "sglang.launch_server", *argv],
                     verification=verification, error=error,
                     log_paths={"server": str(server_log), "run_dir": str(run_dir), "profile_dir": str(trace_dir),
                                **{f"trace_rank{r['rank']}": r["path"] for r in summary["ranks"]}},
                     extra=extra)
    if status == "failed":
        raise PatchbenchError(f"profile of {recipe.name} failed: {error}", log=server_log)
    return ProfileRun(run_id, status, summary, error)


def stored_profiles(store, recipe: str) -> list[dict]:
    """extra["profile"] of a recipe's ok profile runs, oldest first."""
    runs = store.runs(recipe=recipe, status="ok")
    return [r.extra["profile"] for r in runs if r.bench_driver == BENCH_DRIVER and r.extra.get("profile")]
