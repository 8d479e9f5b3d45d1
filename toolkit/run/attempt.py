"""One run of a prepared recipe, from its `running` row to its final status: the one place a run
ends (`recorded`), the values that carry it (`Prepared`, `Attempt`), and how its process groups are
recorded (`supervise`) and ended.

Statuses: a step that raises `RunInvalid` -> `invalid`; any other exception, a timeout or a store
error -> `failed` with a one-line reason and the log tail; Ctrl-C, SIGINT or SIGTERM (`signals_interrupt`)
-> `interrupted`, re-raised. Effects: store writes, files under the run's directory, signals.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from rich.console import Console
from rich.markup import escape

from toolkit.run import machine, reaper, server as srv
from toolkit.run.bench.one_batch import OneBatchFailed
from toolkit.envs import Env
from toolkit.envs.manifest import env_record
from toolkit.errors import PatchbenchError
from toolkit.recipe.load import Recipe
from toolkit.run.identity import model_config_sha256
from toolkit.run.same_server import SameServer
from toolkit.run.sglang_args import StaticCheck, launch_argv
from toolkit.results.store import Store, StoreUnavailable
from toolkit.tree.applied import AppliedTree


class RunInvalid(PatchbenchError):
    """A step found the run measured something other than the recipe: stored `invalid`."""

    def __init__(self, message: str, *, problems: list[str] | None = None, samples: list | None = None,
                 config_verified: bool = False):
        super().__init__(message)
        self.problems = problems or [message]
        self.samples = samples or []  # what was measured before the step refused: kept with the run
        self.config_verified = config_verified  # False: the config differs; True: verified, then refused


class Interrupted(KeyboardInterrupt):
    """Ctrl-C's exception, also raised for SIGTERM while a sweep runs."""


@dataclass
class Prepared:
    """A recipe variant ready to launch: its trees, its env and the static check's verdict."""

    recipe: Recipe
    trees: list[AppliedTree]
    env: Env | None
    check: StaticCheck | None = None
    label: str | None = None  # name recorded in the store (a variant of the recipe, for bisect)
    timings: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # added to each run's `extra` (`track`: the upstream point)

    @property
    def name(self) -> str:
        return self.label or self.recipe.name


@dataclass
class Attempt:
    """One run of a prepared recipe, begun in the store; `recorded` finishes it. `cleanup` ends what
    the steps started (server groups, live-group records) whatever happens."""

    prepared: Prepared
    run_id: str
    run_dir: Path
    repeat: int
    home: Path
    store: Store
    console: Console
    host: str
    cleanup: contextlib.ExitStack
    timings: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    logs: dict = field(default_factory=dict)  # name -> path of a log this run wrote
    extra: dict = field(default_factory=dict)  # the run's `extra` (steps add to it: evidence verdicts)
    finished: bool = False
    answer_launches: int | None = None  # overrides the recipe's [quality] launches (EVERY_LAUNCH: always ask)
    answer_rule: object | None = None  # toolkit.run.quality.AnswerRule: asks while a sequential verdict is unsettled
    # the benchmark's samples once it measured: a run that fails or is interrupted in a later step (the output
    # check, the evidence) is stored with them (not counted: only ok runs are), so no measured number is lost
    measured: list | None = None
    current: tuple | None = None  # (step name, its monotonic start) while a step runs
    kept: list = field(default_factory=list)  # samples already in the store (keep_measured): not stored twice
    started: float = field(default_factory=time.time)  # wall clock at its start: what this launch wrote
    # toolkit.run.same_server.Guard: the verify step's check that no earlier configuration of the sweep
    # launched this server (SameServer: stored as a verify run, not benchmarked)
    same_server: Callable | None = None

    @property
    def title(self) -> str:
        return f"{self.prepared.name} repeat {self.repeat}"


@contextlib.contextmanager
def recorded(p: Prepared, *, home: Path, store: Store, repeat: int, group_id: str, console: Console,
             host: str | None = None, kind: str = "benchmark", answer_launches: int | None = None,
             answer_rule=None, same_server=None) -> Iterator[Attempt]:
    """Begin a run in the store and finish it whatever happens: the one place a run ends.

    RunInvalid -> `invalid`; any other exception (a step's, a timeout, the store's) -> `failed`
    with a one-line reason and the log tail, and the sweep goes on; Ctrl-C/SIGTERM -> `interrupted`,
    re-raised. Every process group the steps started is ended first. `kind` says what the run is
    for ("benchmark", "verify": a launch and a verdict only, "profile"); only benchmark runs count in
    tables (toolkit.analysis.selection). `answer_launches`: how many launches of the configuration
    answer, instead of the recipe's rule (toolkit.analysis.variants: the base of a stack, a quality metric);
    `answer_rule` (toolkit.run.quality.AnswerRule): whether this launch answers, instead of both.
    `same_server` (toolkit.run.same_server.Guard): a launch it finds to be another configuration's server
    is stored `ok` as a verify run naming that configuration (`extra.same_server_as`)."""
    run_id = uuid.uuid4().hex
    run_dir = home / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    attempt = Attempt(p, run_id, run_dir, repeat, home, store, console, host or p.recipe.server.host,
                      contextlib.ExitStack(), timings=dict(p.timings), extra={"kind": kind},
                      answer_launches=answer_launches, answer_rule=answer_rule, same_server=same_server)
    begin(attempt, group_id)
    try:
        with attempt.cleanup:
            yield attempt
    except KeyboardInterrupt as exc:
        if not attempt.finished:
            finish(attempt, "interrupted", f"interrupted ({exc.args[0] if exc.args else 'Ctrl-C'})",
                   samples=unkept(attempt, attempt.measured))
        raise
    except SameServer as exc:  # verified, and another configuration's server: nothing to measure again
        attempt.extra.update(kind="verify", same_server_as=exc.other)
        console.print(f"[yellow]{escape(attempt.title)}[/]: {escape(exc.message)}", highlight=False)
        store.finish_run(run_id, "ok", server_info=attempt.info, config_verified=True, timings=attempt.timings,
                         verification=["/server_info matches expectations", exc.message],
                         log_paths=log_paths(attempt), extra=attempt.extra)
        attempt.finished = True
    except RunInvalid as exc:
        finish(attempt, "invalid", exc.message, verification=exc.problems, config_verified=exc.config_verified,
               samples=unkept(attempt, exc.samples) or None)
    except Exception as exc:  # noqa: BLE001 - every failure of a step is a failed run, not a lost one
        if attempt.finished:  # stored already; ending its processes failed
            console.print(f"[red]{escape(attempt.title)}[/]: teardown: {escape(_reason(exc, attempt))}")
        else:
            finish(attempt, "failed", _reason(exc, attempt), tail=getattr(exc, "tail", None),
                   samples=unkept(attempt, attempt.measured))
    else:
        if not attempt.finished:
            finish(attempt, "failed", "the run ended without storing a result")
    keep_files(attempt)


INCOMPLETE = ("benchmark measured and kept; the steps after it (answers check, jit-arch, evidence) never "
              "finished: not a verified run")


def keep_measured(a: Attempt) -> None:
    """Store the benchmark's samples as soon as they are measured, the run still `running` and marked
    `extra.incomplete`: should patchbench be killed (SIGKILL, the machine dying) in a later step, the
    numbers are in the store, and the reaper ends the run `interrupted` saying so (counted nowhere:
    only `ok` runs are). The run's final status, after its last step, drops the mark."""
    new = unkept(a, a.measured)
    timings = dict(a.timings)
    if a.current:  # the step in progress (the benchmark) so far: a run killed after it cost that much too
        name, t0 = a.current
        timings[name] = round(timings.get(name, 0.0) + time.monotonic() - t0, 3)
    try:
        a.store.add_samples(a.run_id, new, extra={**a.extra, "incomplete": INCOMPLETE}, log_paths=log_paths(a),
                            timings=timings)
    except StoreUnavailable:  # the database went away: the run goes on, its end keeps it on this disk (finish)
        return
    a.kept.extend(new)


IN_STEP = "in_step"  # extra key while a measure step runs: {"step", "since" (epoch s)}; finish drops it


def mark_step(a: Attempt, name: str) -> None:
    """Store the seconds of the steps finished so far and the step now starting with its wall-clock start
    (`extra.in_step`), the run still `running`: should patchbench be killed (SIGKILL) in this step, the
    reaper counts its seconds up to when it ended the server's group, or the last write in the run's
    directory (toolkit/run/reaper.py), so a launch killed before its benchmark still costs what it held."""
    try:
        a.store.add_samples(a.run_id, [], timings=dict(a.timings), log_paths=log_paths(a),
                            extra={**a.extra, **({"incomplete": INCOMPLETE} if a.kept else {}),  # keep_measured's mark
                                   IN_STEP: {"step": name, "since": round(time.time(), 3)}})
    except StoreUnavailable:  # the database went away: the run goes on, its end keeps it on this disk (finish)
        pass


def unkept(a: Attempt, samples: list | None) -> list:
    """`samples` less those keep_measured stored already (the same objects)."""
    kept = {id(s) for s in a.kept}
    return [s for s in samples or [] if id(s) not in kept]


def keep_files(a: Attempt) -> None:
    """With `[store] artifacts`, the finished run's files (its processes ended) where the team sees
    them, their paths and sha256 in the store (toolkit/results/artifacts.py)."""
    if a.store.artifacts_dir is None or not a.finished:
        return
    from toolkit.results.artifacts import keep

    try:
        keep(a.store, a.run_id, a.run_dir, a.store.artifacts_dir)
    except (OSError, PatchbenchError) as exc:
        a.console.print(f"[yellow]{escape(a.title)}[/]: its files were not kept in {a.store.artifacts_dir}: "
                        f"{escape(getattr(exc, 'strerror', None) or str(exc))}")


def begin(a: Attempt, group_id: str) -> None:
    p, recipe = a.prepared, a.prepared.recipe
    a.extra.update({**p.extra, "patches": {t.source: list(t.patches) for t in p.trees},
                    "static_check": p.check.fields if p.check else {},
                    "resolved_config": p.check.resolved_config if p.check else {},
                    "target": p.check.target if p.check else None,
                    "env": env_record(p.env.manifest, p.check.resolved_config if p.check else None),
                    "model_config_sha256": model_config_sha256(recipe.server.model)})
    sg_ver, fi_ver = versions(p.env)
    a.store.begin_run(
        run_id=a.run_id, recipe=p.name, recipe_resolved=recipe.to_dict(), lock=_read_json(recipe.lock_path),
        tree_hashes={t.source: t.tree_hash for t in p.trees}, env_key=p.env.key,
        sglang_version=sg_ver or (p.check.version if p.check else None), flashinfer_version=fi_ver,
        arch_list=list(recipe.build.arch), bench_driver=recipe.benchmark.driver,
        bench_params=recipe.benchmark.params(),
        server_argv=["-m", "sglang.launch_server", *launch_argv(recipe.server, host=a.host,
                                                                 port=recipe.server.port or 0)],
        machine=machine.provenance(), env_vars=dict(recipe.server.env), repeat=a.repeat, group_id=group_id,
        log_paths={"run_dir": str(a.run_dir)}, extra=a.extra)


def log_paths(a: Attempt) -> dict:
    return {"run_dir": str(a.run_dir), **{k: str(v) for k, v in a.logs.items() if Path(v).exists()}}


def _main_log(a: Attempt) -> Path | None:
    return next((Path(v) for v in a.logs.values() if Path(v).exists()), None)


def _reason(exc: BaseException, a: Attempt) -> str:
    """One line: the error's own message, or for a bug its type and message (traceback to a file)."""
    if isinstance(exc, srv.ServerFailed) or isinstance(exc, OneBatchFailed):
        return exc.message
    if isinstance(exc, PatchbenchError):
        return str(exc)
    if isinstance(exc, subprocess.TimeoutExpired):
        return f"timed out after {exc.timeout:.0f} s: {' '.join(map(str, exc.cmd))[:200]}"
    log = a.run_dir / "error.log"
    log.write_text("".join(traceback.format_exception(exc)))
    a.logs["error"] = log
    first = (str(exc).splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first} [traceback: {log}]"


def finish(a: Attempt, status: str, error: str, *, tail: str | None = None, **fields) -> None:
    log = _main_log(a)
    tail = tail or (srv.log_tail(log) if log else None)
    colour = "yellow" if status == "interrupted" else "red"
    where = f" (log: {log})" if log and str(log) not in error else ""  # every failure names its log
    a.console.print(f"[{colour}]{escape(a.title)}[/]: {status.upper()}: {escape(error)}{escape(where)}", highlight=False)
    if tail and status == "failed":
        a.console.print("\n".join("    " + ln for ln in tail.splitlines()[-10:]), markup=False, highlight=False)
    try:
        a.store.finish_run(a.run_id, status, error=error, log_tail=tail, server_info=a.info, timings=a.timings,
                           log_paths=log_paths(a), extra=a.extra, **fields)
    except StoreUnavailable as exc:  # the database went away: the run ends here, kept on this disk
        a.finished = True
        kept = keep_locally(a, f"the results store went away ({exc.message}); was {status}: {error}",
                            tail, fields, status=status)
        raise StoreUnavailable(f"{exc.message}; run {a.run_id[:8]} ({a.title}) ended "
                               f"{'ok' if status == 'ok' else 'interrupted'}, its record kept in {kept}",
                               hint=f"when the database is back, `patchbench import {kept}` stores it") from None
    except Exception as exc:  # noqa: BLE001 - the store refused: keep the status at least
        a.console.print(f"[red]{escape(a.title)}[/]: could not store the result ({type(exc).__name__}: {exc})")
        with contextlib.suppress(Exception):
            a.store.finish_run(a.run_id, "failed", error=f"{status}: {error}; storing failed: {exc}"[:500])
    a.finished = True


def keep_locally(a: Attempt, error: str, tail: str | None, fields: dict, *, status: str = "interrupted") -> Path:
    """The run's record as a one-run results export beside its logs (`run.json` in its run dir): what a
    store that went away could not take. Its samples stay with it; its status is `ok` when every step
    had passed (only storing the result failed), else `interrupted`. `import` of it completes the row
    the store began for it."""
    from toolkit.results.exchange import EXPORT_FORMAT
    from toolkit.results.records import RUN_FIELDS, _now
    from toolkit.results.store import SCHEMA_VERSION

    samples = [{"metric": s.metric, "value": s.value, "unit": s.unit, "point": s.point, "point_kind": s.point_kind,
                "repeat": getattr(s, "repeat", None) if getattr(s, "repeat", None) is not None else a.repeat}
               for s in [*a.kept, *(fields.get("samples") or [])]]  # the whole run: import replaces the kept part
    run = {k: v for k, v in fields.items() if k in RUN_FIELDS}
    run.update(run_id=a.run_id, recipe=a.prepared.name, status="ok" if status == "ok" else "interrupted",
               error=error if status != "ok" else None, log_tail=tail,
               repeat=a.repeat, finished_at=_now(), server_info=a.info, timings=a.timings, log_paths=log_paths(a),
               extra=a.extra, samples=samples)
    path = a.run_dir / "run.json"
    path.write_text(json.dumps({"format": EXPORT_FORMAT, "schema_version": SCHEMA_VERSION, "runs": [run]},
                               indent=2, default=str))
    return path


def supervise(a: Attempt, proc: subprocess.Popen, what: str, *, stop: Callable[[], None]) -> None:
    """Record a started process group as live and make `a.cleanup` end it, then forget it."""
    record = reaper.register(a.home, proc.pid, run_id=a.run_id, store=a.store.location, what=what)
    a.cleanup.callback(reaper.unregister, record)
    a.cleanup.callback(stop)


def versions(env) -> tuple[str | None, str | None]:
    pkgs = {}
    for line in (getattr(env, "manifest", {}) or {}).get("packages", []) or []:
        name, _, ver = str(line).partition("==")
        pkgs[name.lower().replace("_", "-")] = ver
    return pkgs.get("sglang"), pkgs.get("flashinfer-python")


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """While a sweep runs, SIGTERM and SIGINT (also when inherited as ignored, as in a background
    job) raise Interrupted, so the current run is stored `interrupted` and its server group ended;
    a second signal during that cleanup is ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = (signal.SIGTERM, signal.SIGINT)

    def on_signal(signum, frame):
        for sig in caught:
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, on_signal) for sig in caught}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
