"""The run as a list of named steps: recipe -> trees -> env -> static check -> launch -> verify
-> benchmark -> store. Each step is a function of the module that owns the concept; this module
only strings them together, records every run in the store and keeps a sweep going after a failure.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from toolkit import machine, server as srv
from toolkit.bench import Sample
from toolkit.check_cache import cached_static_check
from toolkit.envs import Env
from toolkit.errors import BadInput, NoGPU, PatchbenchError
from toolkit.recipe import Recipe
from toolkit.sglang_args import StaticCheck, compare_fields, launch_argv, recipe_args
from toolkit.tree import AppliedTree, apply_recipe

STEPS = ("apply", "build", "check", "launch", "verify", "benchmark", "store")
# Where `--until` can stop: after apply, build, the static check, the /server_info verification
# (a launch, no benchmark: the run is stored with its verdict and no samples), or at the end.
STOPS = ("apply", "build", "check", "verify", "store")


@dataclass
class Prepared:
    """A recipe variant ready to launch: its trees, its env and the static check's verdict."""

    recipe: Recipe
    trees: list[AppliedTree]
    env: Env | None
    check: StaticCheck | None = None
    label: str | None = None  # name recorded in the store (a variant of the recipe, for bisect)
    timings: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.label or self.recipe.name


def _located(exc: PatchbenchError, recipe: str, step: str) -> PatchbenchError:
    return exc.located(recipe=recipe, step=step)


def needs_gpu(recipe: Recipe) -> bool:
    return recipe.server.gpus != 0


def static_model_path(recipe: Recipe, workdir: Path) -> str | None:
    """A model path the parser can read `config.json` from: the real one, or the roofline config."""
    model = recipe.server.model
    if model and (Path(model) / "config.json").is_file():
        return model
    ref = recipe.roofline.get("model")
    if not ref:
        return model
    from toolkit.roofline import load_model_config  # the shipped HF configs (numbers are facts)

    try:
        _, cfg = load_model_config(ref)
    except PatchbenchError:
        return model
    stand_in = workdir / "model"
    stand_in.mkdir(parents=True, exist_ok=True)
    (stand_in / "config.json").write_text(json.dumps(cfg))
    return str(stand_in)


def prepare(recipe: Recipe, home: Path, *, until: str = "store", frozen: bool = False,
            overrides: dict | None = None, label: str | None = None, console: Console | None = None) -> Prepared:
    """apply -> build -> static check. Raises PatchbenchError located at the failing step."""
    from toolkit.envs import ensure_env

    console = console or Console(stderr=True)
    t0 = time.monotonic()
    try:
        results = apply_recipe(recipe, home, frozen=frozen, overrides=overrides)
    except PatchbenchError as exc:
        raise _located(exc, recipe.name, "apply")
    trees = [t for t, _ in results]
    for tree, reused in results:
        console.print(f"[bold]{recipe.name}[/]: {tree.source} {'reused' if reused else 'applied'} "
                      f"tree {tree.tree_hash[:12]} ({len(tree.patches)} patches)")
    prepared = Prepared(recipe, trees, None, label=label)
    prepared.timings["apply"] = time.monotonic() - t0
    if until == "apply":
        return prepared
    t0 = time.monotonic()
    try:
        prepared.env = ensure_env(trees, recipe.build, home, recipe=recipe.name, console=console)
    except PatchbenchError as exc:
        raise _located(exc, recipe.name, "build")
    prepared.timings["build"] = time.monotonic() - t0
    if until == "build":
        return prepared
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="patchbench-check-") as tmp:
        model = static_model_path(recipe, Path(tmp))
        try:
            check, _ = cached_static_check(prepared.env, recipe.server, dict(recipe.expect), home,
                                           model=model, device="cuda" if needs_gpu(recipe) else None)
        except PatchbenchError as exc:
            raise _located(exc, recipe.name, "check")
    prepared.check = check
    prepared.timings["check"] = time.monotonic() - t0
    if not check.ok:
        raise BadInput("static config check failed: " + "; ".join(check.problems), recipe=recipe.name,
                       step="check")
    console.print(f"[bold]{recipe.name}[/]: static check passed (sglang {check.version}"
                  f"{'' if check.resolved else ', defaults unresolved'})")
    return prepared


def _versions(env) -> tuple[str | None, str | None]:
    pkgs = {}
    for line in (getattr(env, "manifest", {}) or {}).get("packages", []) or []:
        name, _, ver = str(line).partition("==")
        pkgs[name.lower().replace("_", "-")] = ver
    return pkgs.get("sglang"), pkgs.get("flashinfer-python")


def run_once(p: Prepared, *, home: Path, store, repeat: int, group_id: str,
             console: Console, host: str | None = None, until: str = "store") -> str:
    """One independent measurement of a prepared recipe: launch, verify, benchmark, store.

    Every outcome is stored: `ok`, `invalid` (the server's effective config differs from the
    expectations) or `failed` (crash, hang, exit; with the log tail). Returns the run id.
    """
    recipe = p.recipe
    bench = recipe.benchmark
    run_id = uuid.uuid4().hex
    run_dir = home / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    server_log = run_dir / "server.log"
    host = host or recipe.server.host
    port = recipe.server.port or srv.free_port(host)
    argv = launch_argv(recipe.server, host=host, port=port)
    environ = {**p.env.run_environ(), **dict(recipe.server.env)}
    sg_ver, fi_ver = _versions(p.env)
    expected = {**(p.check.implied if p.check else {}), **dict(recipe.expect)}
    run_id = store.begin_run(
        run_id=run_id,
        recipe=p.name,
        recipe_resolved=recipe.to_dict(),
        lock=_read_json(recipe.lock_path),
        tree_hashes={t.source: t.tree_hash for t in p.trees},
        env_key=p.env.key,
        sglang_version=sg_ver or (p.check.version if p.check else None),
        flashinfer_version=fi_ver,
        arch_list=list(recipe.build.arch),
        bench_driver=bench.driver,
        bench_params=bench.params(),
        server_argv=["-m", "sglang.launch_server", *argv],
        machine=machine.provenance(),
        env_vars=dict(recipe.server.env),
        repeat=repeat,
        group_id=group_id,
        log_paths={"server": str(server_log), "run_dir": str(run_dir)},
        extra={"patches": {t.source: list(t.patches) for t in p.trees}, "static_check": p.check.fields if p.check else {}},
    )
    timings = dict(p.timings)
    info: dict = {}
    try:
        if bench.driver == "one-batch":
            samples = _one_batch(p, run_dir, environ, timings)
            store.finish_run(run_id, "ok", samples=samples, config_verified=True, timings=timings,
                             verification=["static check passed; one-batch runs no server"])
            return run_id
        t0 = time.monotonic()
        server = srv.launch(p.env.python, argv, host=host, port=port, log=server_log, environ=environ)
        with server:
            timings["launch"] = server.wait_ready(recipe.server.timeout_s)
            console.print(f"[bold]{p.name}[/] repeat {repeat}: server ready in {timings['launch']:.1f} s at {server.url}")
            t0 = time.monotonic()
            info = server.server_info()
            problems = compare_fields(expected, info, source="/server_info")
            timings["verify"] = time.monotonic() - t0
            if problems:
                store.finish_run(run_id, "invalid", error="effective config differs: " + "; ".join(problems),
                                 server_info=info, config_verified=False, verification=problems,
                                 timings=timings, log_tail=srv.log_tail(server_log))
                console.print(f"[red]{p.name}[/] repeat {repeat}: INVALID: {'; '.join(problems)}")
                return run_id
            if until == "verify":
                store.finish_run(run_id, "ok", server_info=info, config_verified=True, timings=timings,
                                 verification=["/server_info matches expectations (stopped before the benchmark)"])
                console.print(f"[bold]{p.name}[/] repeat {repeat}: effective config verified; stopping as asked")
                return run_id
            t0 = time.monotonic()
            samples, errors = _serving(server.url, bench, console, p.name)
            timings["benchmark"] = time.monotonic() - t0
            server.check_alive(wait=5.0 if errors else 0.0)
        status = "invalid" if errors else "ok"
        store.finish_run(run_id, status, samples=samples, server_info=info, config_verified=True,
                         verification=["/server_info matches expectations", *errors], timings=timings,
                         error="; ".join(errors[:3]) if errors else None)
        return run_id
    except srv.ServerFailed as exc:
        store.finish_run(run_id, "failed", error=str(exc.message), log_tail=exc.tail, server_info=info,
                         timings=timings)
        console.print(f"[red]{p.name}[/] repeat {repeat}: FAILED: {exc.message} [log: {exc.log}]")
        return run_id
    except KeyboardInterrupt:
        store.finish_run(run_id, "failed", error="interrupted (Ctrl-C)", log_tail=srv.log_tail(server_log),
                         timings=timings)
        raise
    except PatchbenchError as exc:
        store.finish_run(run_id, "failed", error=str(exc), log_tail=srv.log_tail(server_log), timings=timings)
        console.print(f"[red]{p.name}[/] repeat {repeat}: FAILED: {exc}")
        return run_id


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _serving(url: str, bench, console: Console, name: str) -> tuple[list[Sample], list[str]]:
    from toolkit.bench.serving import ServingConfig, run_serving

    cfg = ServingConfig(
        input_len=bench.input_len,
        output_len=bench.output_len,
        concurrency=tuple(bench.concurrency),
        num_prompts=bench.num_prompts,
        warmup=bench.warmup,
        seed=bench.seed,
        endpoint=bench.endpoint,
        timeout_s=bench.timeout_s,
    )
    points = run_serving(url, cfg)
    samples: list[Sample] = []
    errors: list[str] = []
    for pt in points:
        samples.extend(pt.to_samples())
        errors.extend(f"concurrency {pt.concurrency}: {e}" for e in pt.errors)
    best = max((s.value for s in samples if s.metric == "output_tok_s"), default=0.0)
    console.print(f"[bold]{name}[/]: {len(points)} points, best output {best:.1f} tok/s")
    return samples, errors


def _one_batch(p: Prepared, run_dir: Path, environ: dict, timings: dict) -> list[Sample]:
    import subprocess

    from toolkit.bench.one_batch import one_batch_argv, parse_one_batch_jsonl

    bench = p.recipe.benchmark
    out = run_dir / "one_batch.jsonl"
    log = run_dir / "one_batch.log"
    argv = one_batch_argv(
        python=str(p.env.python),
        sglang_version=_versions(p.env)[0] or (p.check.version if p.check else None) or "0",
        model_path=p.recipe.server.model,
        batch_sizes=bench.batch_sizes,
        input_len=bench.input_len,
        output_len=bench.output_len,
        result_filename=str(out),
        server_argv=recipe_args(p.recipe.server),
    )
    t0 = time.monotonic()
    with open(log, "wb") as fh:
        proc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, env=environ, timeout=bench.timeout_s,
                              start_new_session=True)
    timings["benchmark"] = time.monotonic() - t0
    if proc.returncode != 0:
        raise srv.ServerFailed(f"one-batch benchmark exited with code {proc.returncode}", log=log,
                               tail=srv.log_tail(log), kind="exited")
    return parse_one_batch_jsonl(out, input_len=bench.input_len, output_len=bench.output_len)


def run_sweep(recipes: list[Recipe], *, home: Path, store, repeats: int | None = None, until: str = "store",
              frozen: bool = False, console: Console | None = None) -> dict:
    """Prepare every recipe, then measure them with interleaved repeats (A B A B ...).

    A recipe that fails to prepare is reported and skipped; the sweep goes on with the others.
    Returns {"group_id", "runs": [(recipe, run_id)], "failed": [(recipe, message)]}.
    """
    console = console or Console(stderr=True)
    group_id = uuid.uuid4().hex[:12]
    prepared: list[Prepared] = []
    failed: list[tuple[str, str]] = []
    for recipe in recipes:
        try:
            prepared.append(prepare(recipe, home, until=until, frozen=frozen, console=console))
        except PatchbenchError as exc:
            exc.located(recipe=recipe.name)
            if isinstance(exc, BadInput) and len(recipes) == 1:
                raise
            failed.append((recipe.name, str(exc)))
            console.print(f"[red]error[/]: {exc}")
    result = {"group_id": group_id, "runs": [], "failed": failed}
    if until in ("apply", "build", "check"):
        return result
    gpu_needed = [p.name for p in prepared if needs_gpu(p.recipe)]
    if gpu_needed and not machine.has_cuda_gpu():
        raise NoGPU(
            f"no CUDA GPU on this machine: {', '.join(gpu_needed)} applied, built and passed the static check; "
            "launching needs a GPU (use --until check to stop here on purpose)",
            step="launch",
        )
    n = max([repeats or p.recipe.benchmark.repeats for p in prepared], default=0)
    for rep in range(n):
        for p in prepared:
            if rep < (repeats or p.recipe.benchmark.repeats):
                result["runs"].append((p.name, run_once(p, home=home, store=store, repeat=rep,
                                                        group_id=group_id, console=console, until=until)))
    return result
