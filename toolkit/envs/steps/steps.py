"""The named steps of one build: a log per step (`<root>/logs/<step>.log`), wall time per step,
a status line, and a command runner whose failures name the step, the log's last lines and its path."""

from __future__ import annotations

import concurrent.futures
import re
import shlex
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from toolkit.errors import Interrupted, PatchbenchError

TAIL_LINES = 15


def _tail(path: Path, n: int = TAIL_LINES) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    lines = [ln for ln in lines if ln.strip()]
    tail = lines[-n:]
    # the first error line (the cause; what follows it is often advice) even when the tail is past it
    first = next((ln for ln in lines if ln.lstrip().lower().startswith("error")), None)
    if first is not None and first not in tail:
        tail = [first, "..."] + tail
    return "\n".join("    " + ln[:300] for ln in tail)


class Steps:
    """The named steps of one build: `<root>/logs/<step>.log`, wall time per step, progress."""

    def __init__(self, root: Path, console, *, recipe: str | None = None):
        self.root = Path(root)
        self.logs_dir = self.root / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.console = console
        self.recipe = recipe
        self.timings: dict[str, float] = {}
        self.logs: dict[str, str] = {}  # step -> log path relative to root
        self._lock = threading.Lock()

    def log(self, step: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", step)
        path = self.logs_dir / f"{safe}.log"
        self.logs[step] = str(path.relative_to(self.root))
        return path

    def note(self, step: str, text: str) -> None:
        with self._lock, open(self.log(step), "a") as f:
            f.write(text.rstrip("\n") + "\n")

    @contextmanager
    def step(self, name: str, title: str) -> Iterator[None]:
        t0 = time.monotonic()
        self.log(name)
        status = self.console.status(f"[bold]{title}[/] ...") if self.console else None
        try:
            if status:
                status.start()
            yield
        except PatchbenchError as e:
            if status:
                status.stop()
            e.located(recipe=self.recipe, step=name)
            if self.console:
                self.console.print(f"  [red]x[/] {title} ({time.monotonic() - t0:.1f} s)")
            raise
        except KeyboardInterrupt as e:  # said with the recipe, the step and its log (the env's build is dropped)
            if status:
                status.stop()
            if isinstance(e, Interrupted):
                raise
            raise Interrupted(recipe=self.recipe, step=name,
                              log=self.root / self.logs[name] if name in self.logs else None) from None
        except BaseException:
            if status:
                status.stop()
            raise
        if status:
            status.stop()
        dt = time.monotonic() - t0
        self.timings[name] = round(self.timings.get(name, 0.0) + dt, 3)
        if self.console:
            self.console.print(f"  [green]ok[/] {title} [dim]({dt:.1f} s, {self.logs[name]})[/]")

    def failure(self, step: str, message: str, *, log: Path | None = None,
                hint: str | None = None) -> PatchbenchError:
        log = log or self.log(step)
        tail = _tail(log)
        msg = message + (f"; last lines of the log:\n{tail}" if tail else "")
        return PatchbenchError(msg, recipe=self.recipe, step=step, log=log, hint=hint)

    def run(self, step: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
            cwd: Path | None = None, what: str | None = None) -> str:
        """Run argv with its output appended to the step's log; return this run's output."""
        argv = [str(a) for a in argv]
        log = self.log(step)
        with open(log, "ab") as f:
            f.write(f"$ {shlex.join(argv)}\n".encode())
            if cwd:
                f.write(f"  (in {cwd})\n".encode())
            f.flush()
            start = f.tell()
            try:
                proc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                                      cwd=cwd, stdin=subprocess.DEVNULL)
            except OSError as e:
                raise self.failure(step, f"cannot run {argv[0]}: {e}") from e
            f.write(f"[exit {proc.returncode}]\n".encode())
        with open(log, "rb") as f:
            f.seek(start)
            out = f.read().decode(errors="replace")
        if proc.returncode != 0:
            explicit = [ln[len("PATCHBENCH_ERROR "):] for ln in out.splitlines()
                        if ln.startswith("PATCHBENCH_ERROR ")]
            head = explicit[-1] if explicit else \
                f"{what or Path(argv[0]).name} failed (exit {proc.returncode})"
            raise self.failure(step, head)
        return out

    def run_many(self, step: str, commands: Sequence[tuple[list[str], Path]], *,
                 env: Mapping[str, str], jobs: int) -> None:
        """Run independent commands `jobs` at a time; outputs go to the log in order."""
        log = self.log(step)

        def one(cmd: tuple[list[str], Path]) -> tuple[list[str], Path, int, str]:
            argv, cwd = cmd
            try:
                p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd,
                                   stdin=subprocess.DEVNULL)
                return argv, cwd, p.returncode, p.stdout + p.stderr
            except OSError as e:
                return argv, cwd, 127, str(e)

        failed = None
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for argv, cwd, rc, out in pool.map(one, commands):
                with open(log, "a") as f:
                    f.write(f"$ {shlex.join(argv)}\n  (in {cwd})\n{out}[exit {rc}]\n")
                if rc != 0 and failed is None:
                    failed = (argv, rc)
        if failed:
            src = next((a for a in failed[0] if a.endswith(".cu")), failed[0][0])
            raise self.failure(step, f"nvcc failed on {src} (exit {failed[1]})")



def version_of(argv: Sequence[str]) -> str | None:
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, stdin=subprocess.DEVNULL,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else None

