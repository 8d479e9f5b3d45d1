"""The run as a list of named steps (`STEPS`), each a small function that takes the previous step's
value and returns the next:

    Job -apply_trees-> Applied -ensure_env-> Built -static_check-> Prepared        (once per recipe)
    Attempt -launch-> Launched -verify-> Verified -benchmark-> Measured -quality-> Measured
            -jit_arch-> Measured -check_evidence-> Measured -store-> run id        (once per repeat)

`prepare` runs the first three, `run_once` the rest inside `attempt.recorded`, the one place that
finishes a run whatever happens: a step that raises finishes it `failed` (or `invalid`, for
`RunInvalid`) with a one-line reason, Ctrl-C/SIGTERM finish it `interrupted`, and the run's process
groups are ended in every case. `run_sweep` first reaps what dead patchbench processes left
(toolkit/run/reaper.py), then interleaves repeats of several recipes and goes on after a failure.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.markup import escape

from toolkit.results import metrics
from toolkit.run import autotune_record, evidence, jit_check, machine, quality as output_check, reaper, server as srv
from toolkit.run import one_batch_step, serving_step
from toolkit.run.attempt import (Attempt, Prepared, RunInvalid, keep_measured, log_paths, mark_step, recorded,
                                 signals_interrupt, supervise, unkept)
from toolkit.run.bench import Sample, point_record
from toolkit.run.gpustate import record as gpu_record
from toolkit.run.gpustate.owners import patchbench_tree
from toolkit.run.hoststate import HostSampler
from toolkit.envs import Env, ensure_env as build_env
from toolkit.errors import BadInput, NoGPU, PatchbenchError, plural, raise_refused
from toolkit.recipe.load import Recipe
from toolkit.run.check_cache import cached_check_recipe
from toolkit.run.launch_env import launch_environ, record as launch_env_record, scratch_dir
from toolkit.run.same_server import Guard as SameServerGuard
from toolkit.run.sglang_args import check_record, check_summary, launch_argv, recipe_args, server_info_problems
from toolkit.results.store import Store, StoreUnavailable
from toolkit.tree.applied import AppliedTree, apply_recipe

# Where `--until` can stop: after apply, build, the static check, the /server_info verification
# (a launch, no benchmark: the run is stored with its verdict and no samples), or at the end.
STOPS = ("apply", "build", "check", "verify", "store")


def step(name: str) -> Callable:
    """Name a step (the key of its timing and of `--until`)."""
    def mark(fn: Callable) -> Callable:
        fn.step_name = name
        return fn
    return mark


# ---------------------------------------------------------------------------- values between steps

@dataclass(frozen=True)
class Job:
    """What `prepare` was asked to do."""

    recipe: Recipe
    home: Path
    console: Console
    frozen: bool = False
    overrides: dict | None = None
    label: str | None = None
    strict: bool = False  # `--strict-check`: an unresolved static check is BadInput (also `[target] strict`)


@dataclass(frozen=True)
class Applied:
    """The job's sources as patched trees (one commit per patch)."""

    job: Job
    trees: list[AppliedTree]


@dataclass(frozen=True)
class Built:
    applied: Applied
    env: Env  # published, content-addressed (toolkit.envs)


@dataclass(frozen=True)
class Launched:
    """A run begun in the store and, for the serving driver, its server up and healthy; its process
    group is ended by the attempt's cleanup whatever happens next."""

    attempt: Attempt
    server: srv.Server | None  # None for the one-batch driver (it runs no server)


@dataclass(frozen=True)
class Verified:
    """/server_info (or, for one-batch, the static check) agrees with the recipe."""

    launched: Launched
    notes: list[str]  # what was verified, stored with the run


@dataclass(frozen=True)
class Measured:
    verified: Verified
    samples: list[Sample]
    errors: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------- prepare: once per recipe

@step("apply")
def apply_trees(job: Job) -> Applied:
    """Materialise each source and apply the recipe's patches (git commits in the tree cache)."""
    results = apply_recipe(job.recipe, job.home, frozen=job.frozen, overrides=job.overrides)
    for tree, reused in results:
        job.console.print(f"[bold]{escape(job.recipe.name)}[/]: {tree.source} {'reused' if reused else 'applied'} "
                          f"tree {tree.tree_hash[:12]} ({plural(len(tree.patches), 'patch')})")
    return Applied(job, [t for t, _ in results])


@step("build")
def ensure_env(applied: Applied) -> Built:
    """Find or build the content-addressed env of the trees (writes under $PATCHBENCH_HOME/envs)."""
    job = applied.job
    env = build_env(applied.trees, job.recipe.build, job.home, recipe=job.recipe.name, console=job.console)
    return Built(applied, env)


@step("check")
def static_check(built: Built) -> Prepared:
    """sglang's own validation and default resolution in the env, for the recipe's `[target]`
    (toolkit.run.sglang_args.check_recipe), plus patchbench's model-shape rules; BadInput if sglang
    refuses the arguments, they contradict `[expect]`, or the model does not fit (a scratch
    directory holds a stand-in model config)."""
    job = built.applied.job
    recipe = job.recipe
    with tempfile.TemporaryDirectory(prefix="patchbench-check-") as tmp:
        check, reused = cached_check_recipe(built.env, recipe, Path(tmp), job.home,
                                            device="cuda" if needs_gpu(recipe) else None)
    if not check.ok:
        raise BadInput("static config check failed: " + "; ".join(check.problems))
    name = escape(recipe.name)
    if check.unresolved:
        strict = job.strict or bool(recipe.target and recipe.target.strict)
        if strict:
            raise BadInput(f"static check {check.outcome}", hint="sglang could not resolve the configuration here; "
                           "--strict-check / [target] strict = true make that an error")
        job.console.print(f"[yellow]{name}: static check {escape(check.outcome)}[/] (sglang {escape(str(check.version))}; "
                          "parsed and compared, defaults not verified; --strict-check makes this an error)")
    else:
        job.console.print(f"[bold]{name}[/]: static check passed{' (remembered)' if reused else ''} "
                          f"(sglang {escape(str(check.version))})")
    for warning in check.warnings:
        job.console.print(f"[yellow]{name}: warning:[/] {escape(warning)}")
    if (check.resolved_config or {}).get("enable_eplb"):
        every = (check.resolved_config or {}).get("eplb_rebalance_num_iterations")
        job.console.print(f"[yellow]{name}: note:[/] EPLB on: sglang moves experts every {escape(str(every))} forward "
                          "passes from start, so a measured window may straddle a rebalance")
    for line in check_summary(check):
        job.console.print(line, markup=False, highlight=False)
    return Prepared(recipe, built.applied.trees, built.env, check, label=job.label)


# ---------------------------------------------------------------------------- measure: once per repeat

@step("launch")
def launch(attempt: Attempt) -> Launched:
    """Start the server under its supervisor (own process group, recorded in the live registry,
    ended by `attempt.cleanup`) and wait until /health_generate answers, on another free port when
    another launch took the one picked (toolkit.run.server.launch_ready). The one-batch driver
    starts nothing here. Raises BindError / ServerFailed."""
    p = attempt.prepared
    attempt.extra.update(check_record(p.check))  # stored with the run: did the static check resolve, what it presented
    server_spec = p.recipe.server
    if p.recipe.benchmark.driver == "one-batch":
        return Launched(attempt, None)
    log = attempt.logs["server"] = attempt.run_dir / "server.log"

    def again(exc: srv.PortTaken) -> None:
        attempt.console.print(f"[yellow]{escape(attempt.title)}: {escape(exc.message)}; launching again on "
                              "another port[/]")

    environ = launch_environ(p.env.run_environ(), server_spec.env, attempt.run_dir)
    attempt.extra["launch_env"] = launch_env_record(environ, server_spec.env)
    shell = attempt.extra["launch_env"]["inherited"]
    if shell:
        attempt.console.print(f"[dim]{escape(attempt.title)}: the server inherits from the shell (recorded): "
                              + escape(", ".join(f"{k}={v}" for k, v in shell.items())) + "[/]", highlight=False)
    server = srv.launch_ready(p.env.python, lambda port: launch_argv(server_spec, host=attempt.host, port=port),
                              host=attempt.host, port=server_spec.port, log=log,
                              environ=environ,
                              timeout_s=server_spec.timeout_s, retrying=again, scratch=scratch_dir(attempt.run_dir),
                              started=lambda s: supervise(attempt, s.proc, "server", stop=s.stop))
    attempt.console.print(f"[bold]{escape(attempt.title)}[/]: server ready in {time.monotonic() - server.started:.1f} s "
                          f"at {server.url}")
    return Launched(attempt, server)


@step("verify")
def verify(launched: Launched) -> Verified:
    """GET /server_info and compare it with the static check's implied fields and `[expect]`;
    raises RunInvalid naming every difference."""
    attempt, server = launched.attempt, launched.server
    if server is None:
        return Verified(launched, ["static check passed; one-batch runs no server"])
    p = attempt.prepared
    attempt.info = server.server_info()
    problems = server_info_problems(p.check, dict(p.recipe.expect), attempt.info)
    if problems:
        raise RunInvalid("effective config differs: " + "; ".join(problems), problems=problems)
    if attempt.same_server is not None:  # a sweep: SameServer when an earlier configuration launched this server
        attempt.same_server(p, attempt.info)
    return Verified(launched, ["/server_info matches expectations"])


@step("benchmark")
def benchmark(verified: Verified) -> Measured:
    """Drive the benchmark: the serving client against the server, or sglang's one-batch
    benchmark in its own supervised process group (writes one_batch.jsonl and one_batch.log). The
    run's GPUs are sampled meanwhile (gpu_state.json, extra["gpu_state"], gpu_* samples), and the
    host's CPU times (extra["host_state"]: other processes' CPU, steal); under strict box mode a
    throttled or shared run is RunInvalid."""
    attempt, server = verified.launched.attempt, verified.launched.server
    bench = attempt.prepared.recipe.benchmark
    server_pid = server.proc.pid if server is not None else None
    sampler = gpu_record.sampler_for(attempt, server_pid)  # GPU state (toolkit.run.gpustate)
    host = HostSampler(lambda: patchbench_tree(server_pid)).start()  # who else used the CPUs
    try:
        if bench.driver == "one-batch":
            samples, errors, points = one_batch_step.measure(attempt), [], []
        else:
            samples, errors, accounts, points = serving_step.measure(server.url, bench, attempt.console, attempt.prepared.name,
                                                 model=attempt.prepared.recipe.server.model,
                                                 env_dir=attempt.prepared.env.path)
            attempt.extra["server_account"] = accounts
    finally:
        attempt.extra["host_state"] = host.stop()
        box = gpu_record.attach(attempt, sampler.stop(), "batch" if bench.driver == "one-batch" else "concurrency")
    if server is not None:
        try:
            server.check_alive(wait=5.0 if errors else 0.0)
        except srv.ServerFailed as exc:  # it died mid-benchmark: name the point, keep the ones before it
            kept, exc.message = point_record.before_crash(samples, points, exc.message)
            attempt.measured = [*kept, *box]
            raise
    attempt.measured = [*samples, *box]  # kept with the run should a later step fail, or patchbench die
    keep_measured(attempt)
    gpu_record.enforce(attempt, [*samples, *box])
    return Measured(verified, [*samples, *box], errors)


@step("quality")
def quality(measured: Measured) -> Measured:
    """The recipe's `[quality]` output check in the same launch (toolkit.run.quality): answers stored
    beside the logs, sanity/agreement samples; degenerate answers make the run `invalid`, a failed
    check is noted and keeps the speed numbers."""
    attempt, server = measured.verified.launched.attempt, measured.verified.launched.server
    if attempt.prepared.recipe.quality is None or server is None:
        return measured
    samples, problems = output_check.check(attempt, server.url)
    if attempt.extra["quality"]["status"] == "skipped":  # enough launches of this configuration answered
        return measured
    if attempt.prepared.recipe.quality.eval:  # the gate tier: sglang's own evaluation (toolkit.run.gate)
        from toolkit.run import gate

        samples += gate.run(attempt, server.host, server.port)
    return Measured(measured.verified, [*measured.samples, *samples], [*measured.errors, *problems])


@step("jit-arch")
def jit_arch(value: Verified | Measured) -> Verified | Measured:
    """What FlashInfer's JIT cache holds for this launch is the recipe's build.arch (toolkit.run.jit_check)."""
    launched = (value.verified if isinstance(value, Measured) else value).launched
    jit_check.check(launched.attempt, getattr(value, "samples", None), launched.server and launched.server.proc.pid)
    return value


@step("evidence")
def check_evidence(measured: Measured) -> Measured:
    """Did every patch run in the live server? The recipe's `[evidence]` against the server log and
    /server_info (toolkit.run.evidence). Missing evidence: RunInvalid (stored `invalid`, with the reason).
    Named log groups that are registered metrics (distinct_experts) become run-level samples (point 0).
    The tactics FlashInfer's autotuner chose at start, where the log names its result files, are kept
    with the run (toolkit.run.autotune_record: extra["autotune"], copies under autotune/)."""
    attempt = measured.verified.launched.attempt
    recipe = attempt.prepared.recipe
    patches = [name for tree in attempt.prepared.trees for name in tree.patches]
    log = attempt.logs.get("server") or attempt.logs.get("one-batch")  # where the patched code logs
    text = Path(log).read_text(errors="replace") if log and Path(log).exists() else ""
    verdict = evidence.check_evidence(patches, recipe.evidence, text, attempt.info)
    check = attempt.prepared.check  # one-batch runs no server: sglang's static resolution of the same args
    config = attempt.info if attempt.info is not None else (check.resolved_config if check else None)
    attempt.extra.update(evidence.run_extra(verdict, recipe_args(recipe.server), config))
    tuned = autotune_record.collect(text, attempt.run_dir)  # which kernels the autotuner chose (GPU boxes)
    if tuned is not None:
        attempt.extra["autotune"] = tuned
    undeclared = [p for p, s in verdict.status.items() if s == evidence.UNDECLARED]
    if undeclared:
        attempt.console.print(f"[yellow]{escape(attempt.title)}[/]: no activation evidence declared for "
                              + escape(f"{', '.join(undeclared)} (add [evidence.\"PATCH\"] to the recipe)"))
    kind = "batch" if recipe.benchmark.driver == "one-batch" else "concurrency"
    extra = [Sample(name, value, metrics.unit_of(name), 0, kind) for name, value in verdict.metrics.items()
             if metrics.lookup(name) is not None]
    if not verdict.ok:  # stored invalid with its numbers: `--missing-evidence` can still select it
        raise RunInvalid("activation evidence missing: " + "; ".join(verdict.problems), problems=verdict.problems,
                         samples=[*measured.samples, *extra], config_verified=True)
    return Measured(measured.verified, [*measured.samples, *extra], measured.errors)


@step("store")
def store(value: Verified | Measured) -> str:
    """Finish the run in the store: `ok` with its samples, or `invalid` when requests failed."""
    measured = value if isinstance(value, Measured) else None
    verified = measured.verified if measured else value
    attempt = verified.launched.attempt
    notes = list(verified.notes)
    if measured is None:
        notes.append("stopped before the benchmark, as asked")
        attempt.console.print(f"[bold]{escape(attempt.title)}[/]: effective config verified; stopping as asked")
    errors = measured.errors if measured else []
    attempt.store.finish_run(attempt.run_id, "invalid" if errors else "ok",
                             samples=unkept(attempt, measured.samples) if measured else None, server_info=attempt.info,
                             config_verified=True, verification=notes + errors, timings=attempt.timings,
                             log_paths=log_paths(attempt), extra=attempt.extra,
                             error="; ".join(errors[:3]) if errors else None)
    attempt.finished = True
    return attempt.run_id


STEPS = (apply_trees, ensure_env, static_check, launch, verify, benchmark, quality, jit_arch, check_evidence, store)
PREPARE_STEPS = STEPS[:3]
MEASURE_STEPS = STEPS[3:]


def steps_until(until: str) -> tuple[tuple, tuple]:
    """(prepare steps, measure steps) run when stopping after `until` (a STOPS name): the steps up
    to it; `verify` still stores its verdict (launch -> verify -> jit_arch -> store)."""
    if until == "store":
        return PREPARE_STEPS, MEASURE_STEPS
    if until == "verify":
        return PREPARE_STEPS, (launch, verify, jit_arch, store)
    names = [s.step_name for s in PREPARE_STEPS]
    if until not in names:
        raise BadInput(f"--until must be one of {', '.join(STOPS)}, not {until!r}")
    return PREPARE_STEPS[:names.index(until) + 1], ()


def _run_steps(steps: tuple, value, timings: dict, attempt: Attempt | None = None):
    for fn in steps:
        t0 = time.monotonic()
        if attempt is not None:  # the step in progress, for what a run killed in it had spent (keep_measured)
            attempt.current = (fn.step_name, t0)
            mark_step(attempt, fn.step_name)  # and in the store, for a SIGKILL (the reaper counts it)
        try:
            value = fn(value)
        finally:  # a step that failed or was interrupted spent its time too: the launch's cost counts it
            timings[fn.step_name] = round(timings.get(fn.step_name, 0.0) + time.monotonic() - t0, 3)
    return value


# ---------------------------------------------------------------------------- entry points

def needs_gpu(recipe: Recipe) -> bool:
    return recipe.server.gpus != 0


def prepare(recipe: Recipe, home: Path, *, until: str = "store", frozen: bool = False,
            overrides: dict | None = None, label: str | None = None, console: Console | None = None,
            strict: bool = False) -> Prepared:
    """apply_trees -> ensure_env -> static_check (or fewer, with `until`). Raises PatchbenchError
    located at the failing step."""
    job = Job(recipe, home, console or Console(stderr=True), frozen, overrides, label, strict)
    if recipe.quality is not None:  # a malformed prompts file is bad input before anything is built
        from toolkit.run.prompts import load_prompts

        load_prompts(recipe.quality.prompts)
        if recipe.quality.eval and recipe.quality.launches != 0 and until not in ("apply", "build", "check"):
            from toolkit.run import gate

            gate.prepare(recipe.quality, home, job.console)  # the dataset (never downloaded), the harness's env
    timings: dict = {}
    value = job
    for fn in steps_until(until)[0]:
        try:
            value = _run_steps((fn,), value, timings)
        except PatchbenchError as exc:
            raise exc.located(recipe=recipe.name, step=fn.step_name)
        except OSError as exc:  # a write the disk refused: where, and what to do
            raise_refused(exc, home=home, recipe=recipe.name, step=fn.step_name)
    if isinstance(value, Applied):
        value = Prepared(recipe, value.trees, None, label=label)
    elif isinstance(value, Built):
        value = Prepared(recipe, value.applied.trees, value.env, label=label)
    value.timings.update(timings)
    return value


def run_once(p: Prepared, *, home: Path, store: Store, repeat: int, group_id: str, console: Console,
             host: str | None = None, until: str = "store", answer_launches: int | None = None,
             answer_rule=None, same_server=None) -> str:
    """One independent measurement of a prepared recipe: launch -> verify -> benchmark ->
    quality -> check_evidence -> store, inside `recorded`. Every outcome is stored (ok, invalid,
    failed, interrupted); returns the run id. Raises only for Ctrl-C/SIGTERM (after storing).
    `answer_launches`: launches of the configuration that answer, instead of the recipe's rule;
    `answer_rule` (toolkit.run.quality.AnswerRule): whether this launch answers, instead of both;
    `same_server`: toolkit.run.same_server.Guard, checked at the verify step."""
    with recorded(p, home=home, store=store, repeat=repeat, group_id=group_id, console=console,
                  host=host, kind="verify" if until == "verify" else "benchmark",
                  answer_launches=answer_launches, answer_rule=answer_rule, same_server=same_server) as attempt:
        _run_steps(steps_until(until)[1], attempt, attempt.timings, attempt)
    return attempt.run_id


def run_sweep(recipes: list[Recipe], *, home: Path, store: Store, repeats: int | None = None, until: str = "store",
              frozen: bool = False, console: Console | None = None, strict: bool = False,
              measure: Callable | None = None, keep_going: bool = False,
              same_server: SameServerGuard | None = None) -> dict:
    """Reap what dead patchbench processes left, prepare every recipe, then measure them with
    interleaved repeats (A B A B ...), or with `measure(prepared, home=, store=, group_id=,
    console=, result=)` when given (`run` without `--repeats`: toolkit.analysis.sequential_runs).

    Every recipe is prepared (applied, built, checked) before the first launch. When one fails to
    prepare, nothing is launched (the others' launches would measure half of what was asked: a
    comparison with a side missing), unless `keep_going` (a sweep's independent variants): then it
    is reported and skipped. A run that fails is stored and the sweep goes on. Returns {"group_id",
    "runs": [(recipe, run_id)], "failed": [(recipe, message)], "not_launched": [recipe]}.
    `same_server` (a sweep's toolkit.run.same_server.Guard): a configuration whose launch /server_info
    shows to be an earlier one's server is not benchmarked, named in result["same_server"].
    """
    console = console or Console(stderr=True)
    for line in reaper.reap(home, store):
        console.print(f"[yellow]reaped[/]: {escape(line)}")
    group_id = uuid.uuid4().hex[:12]
    prepared: list[Prepared] = []
    failed: list[tuple[str, str]] = []
    bad_input: list[str] = []  # recipes refused as bad input (exit 2 once the others are measured)
    for recipe in recipes:
        try:
            prepared.append(prepare(recipe, home, until=until, frozen=frozen, console=console, strict=strict))
        except PatchbenchError as exc:
            exc.located(recipe=recipe.name)
            if isinstance(exc, BadInput) and len(recipes) == 1:
                raise
            failed.append((recipe.name, str(exc)))
            if isinstance(exc, BadInput):
                bad_input.append(recipe.name)
            console.print(f"[red]error[/]: {escape(str(exc))}")
    result = {"group_id": group_id, "runs": [], "failed": failed, "bad_input": bad_input,
              "resolved": {p.name: p.check.resolved_config for p in prepared if p.check}}
    if until in ("apply", "build", "check"):
        return result
    if failed and prepared and not keep_going:  # launch nothing: every failure is said above, with its step
        result["not_launched"] = [p.name for p in prepared]
        console.print(f"[red]nothing launched[/]: {escape(', '.join(n for n, _ in failed))} failed to prepare, so "
                      f"{escape(', '.join(result['not_launched']))} {'was' if len(prepared) == 1 else 'were'} not "
                      "launched either (fix the recipe and run again; prepared envs are reused)")
        return result
    gpu_needed = [p.name for p in prepared if needs_gpu(p.recipe)]
    if gpu_needed and not machine.has_cuda_gpu():
        raise NoGPU(
            f"no CUDA GPU on this machine: {', '.join(gpu_needed)} applied, built and passed the static check; "
            "launching needs a GPU (stop here on purpose with `--until check`: `patchbench run NAME --until check`, "
            "or through nox `nox -s recipe-NAME -- --until check`; or `--executor slurm` to run on a GPU node)",
            step="launch",
        )
    guard = same_server if until == "store" else None
    if guard:  # configurations whose stored launches were an earlier one's server: not launched at all
        guard.seed(store, [(p.name, p.recipe, p.env.key if p.env else None) for p in prepared])
        result["same_server"] = guard.same
    if measure is not None and until == "store":
        with signals_interrupt():
            measure(prepared, home=home, store=store, group_id=group_id, console=console, result=result,
                    **({"same_server": guard} if guard else {}))
        return result

    def wanted(p: Prepared) -> int:  # a verification needs one launch, a measurement the recipe's repeats
        return repeats or (1 if until == "verify" else p.recipe.benchmark.repeats)

    n = max([wanted(p) for p in prepared], default=0)
    with signals_interrupt():
        for rep in range(n):
            for p in prepared:
                if rep < wanted(p) and p.name not in (guard.same if guard else ()):
                    try:
                        rid = run_once(p, home=home, store=store, repeat=rep, group_id=group_id,
                                       console=console, until=until, same_server=guard or None)
                    except StoreUnavailable:  # the database went away: nothing more can be stored
                        raise
                    except PatchbenchError as exc:  # the run could not even be begun in the store
                        failed.append((p.name, str(exc.located(recipe=p.name))))
                        console.print(f"[red]error[/]: {escape(str(exc))}")
                        continue
                    result["runs"].append((p.name, rid))
    return result
