"""nox sessions: `tests`, `demo`, `demo-real`, `demo-update`, `demo-sweep`, `demo-track`, `compare`, `bisect`, and one
`recipe-NAME` per recipe (a recipe with `[matrix]` runs `patchbench sweep`).

`nox -l` lists every experiment in recipes/ with its description. The session's own venv only hosts
the toolkit; each recipe's envs are patchbench's (content-addressed under $PATCHBENCH_HOME).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
RECIPES = ROOT / "recipes"
DEMO = ["demo/baseline", "demo/fast", "demo/slow"]
DEMO_REAL = ["cpu/baseline", "cpu/oea"]

nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "uv|virtualenv"  # uv when installed (it is a patchbench dependency)
nox.options.reuse_existing_virtualenvs = True  # only the toolkit lives there; recipe envs are keyed


def _toolkit(session: nox.Session, *extras: str) -> None:
    session.install("-e", f".[{','.join(extras)}]" if extras else ".")


def _machine_pip_sources(session: nox.Session) -> list[str]:
    """The pip config's indexes and find-links as uv arguments (empty under pip, which reads it)."""
    if session.venv_backend != "uv":
        return []
    code = "import json; from toolkit.envs import pip_sources; print(json.dumps(pip_sources().uv_install_args()))"
    out = session.run("python", "-c", code, silent=True)
    return json.loads(out.strip().splitlines()[-1])


def _test_workers(slow: bool) -> str:
    """pytest-xdist workers. The fast tier mostly waits (on miniature servers, their paced steps, builds),
    so more workers than cores finish sooner: 3 per CPU, at least 6 (2026-12-06, this 2-core box, the
    same 874 tests: -n 4 9m22s, -n 6 7m01s, 650 CPU-s either way). The slow tier adds real sglang
    launches (GBs of memory, CPU-bound imports and model loads each): 2 per CPU, at least 4. At most 16."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return str(min(16, max(4, 2 * cpus)) if slow else min(16, max(6, 3 * cpus)))


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """The test suite in parallel (add `-- --slow` for real PyPI artifacts and CUTLASS compiles,
    `-- -n 0` for one process)."""
    _toolkit(session, "test")
    # CPU torch from the machine's pip sources: the OEA tests run the patched sglang routing. uv does
    # not read pip's config, so the toolkit's own reading of it (toolkit.envs.pip_sources) is passed.
    session.install(*_machine_pip_sources(session), "torch==2.13.0")
    # Each test has its own PATCHBENCH_HOME (the `home` fixture); tests sharing one costly fixture
    # carry an xdist_group mark and run on one worker. A later -n in posargs wins.
    slow = os.environ.get("PATCHBENCH_SLOW") == "1" or "--slow" in session.posargs
    session.run("pytest", "-n", _test_workers(slow), "--dist", "loadgroup", "--durations", "15", *session.posargs,
                env={"PATCHBENCH_REQUIRE_TORCH": "1", **_bytecode_cache(session)})


def _bytecode_cache(session: nox.Session) -> dict[str, str]:
    """Bytecode written, to the session's own folder (PYTHONPYCACHEPREFIX: source trees stay clean).
    Under PYTHONDONTWRITEBYTECODE=1 (set on some boxes) every pytest worker and every Python the tests
    start compiled its sources afresh, the session venv's packages too (uv installs no bytecode):
    collection took 11 CPU-s per worker instead of 3.3 (pytest's assertion rewriting of the test files,
    toolkit, its dependencies), `python -m toolkit --help` 2.0 instead of 0.95. The bytecode of the
    previous session's scratch trees (under the temp dir, never seen again) is dropped, so the folder
    does not grow run after run; so is that of uv's isolated build envs (`uv build` of every tree the
    tests build: setuptools in a new `builds-v0/.tmpXXXX` under uv's cache each time, 2.7 MB of
    bytecode never read again: 869 MB, 331 of them, had piled up in one checkout's session folder)."""
    prefix = Path(session.virtualenv.location) / "pycache"
    scratch = prefix / Path(tempfile.gettempdir()).resolve().relative_to("/")
    shutil.rmtree(scratch, ignore_errors=True)
    for builds in (prefix / _uv_cache().resolve().relative_to("/")).glob("builds-v*"):
        shutil.rmtree(builds, ignore_errors=True)
    # an empty PYTHONDONTWRITEBYTECODE counts as unset (nox's env cannot unset a variable on every version)
    return {"PYTHONPYCACHEPREFIX": str(prefix), "PYTHONDONTWRITEBYTECODE": ""}


def _uv_cache() -> Path:
    """uv's default cache dir (UV_CACHE_DIR, else XDG_CACHE_HOME/uv, else ~/.cache/uv)."""
    if os.environ.get("UV_CACHE_DIR"):
        return Path(os.environ["UV_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "uv"


@nox.session(python="3.11")
def demo(session: nox.Session) -> None:
    """The whole pipeline on the bundled miniature upstream: apply, build, run, store, compare."""
    _toolkit(session)
    session.run("patchbench", "run", *DEMO, *session.posargs)
    session.run("patchbench", "compare", *DEMO, "--metric", "output_tok_s", "--metric", "itl_ms_median")
    session.run("patchbench", "report", *DEMO, "-o", "patchbench-report")


@nox.session(name="demo-real", python="3.11")
def demo_real(session: nox.Session) -> None:
    """The main job on real sglang 0.5.23 (PyPI) serving on this CPU: baseline and OEA on a tiny
    GLM-4-MoE patchbench writes itself; run (launch, verify, benchmark, answers, evidence), compare
    speed and answers, report, profile OEA's decode step: the README's main job. From a fresh clone
    with empty caches on an idle 2-core box: 7m58s (2026-12-04: env ~1 min, 5 launches of 65-80 s to
    ready); ~15-18 min on a loaded one."""
    _toolkit(session)
    # --fixed: the recipes' 2 launches each. On CPU, OEA's speed effect is within the launch noise, so
    # the sequential default would launch up to 16 each (2-3 min a launch) to say "not settled"
    session.run("patchbench", "run", *DEMO_REAL, "--fixed", *session.posargs)
    session.run("patchbench", "compare", *DEMO_REAL, "--metric", "output_tok_s", "--metric", "itl_ms_median")
    session.run("patchbench", "report", *DEMO_REAL, "-o", "patchbench-report-real")
    # one profiled decode step by kernel family: 8 steps at batch 8, from all requests decoding
    session.run("patchbench", "profile", "cpu/oea", "--concurrency", "8", "--steps", "8")


@nox.session(name="demo-update", python="3.11")
def demo_update(session: nox.Session) -> None:
    """Reproduce an update's gain on the miniature: build its releases 0.1.0..0.1.8 (one brings a 2x
    decode speedup) on a local index, bisect them (direction better), then the commits between tags."""
    _toolkit(session)
    releases = ROOT / ".patchbench" / "mini-releases"
    session.run("python", str(ROOT / "upstream" / "mini_releases.py"), str(releases), "--plant", "gain")
    session.run("patchbench", "bisect", "demo/update", "--source", "sglang", "--good", "0.1.0", "--bad", "0.1.8",
                "--direction", "better", "--metric", "output_tok_s@1", "--git", str(releases / "repo"),
                *session.posargs, env={"PATCHBENCH_MINI_INDEX": str(releases / "index")})


@nox.session(name="demo-sweep", python="3.11")
def demo_sweep(session: nox.Session) -> None:
    """The miniature's cost knobs as a 3 x 2 matrix plus one combination its validation refuses:
    static pruning, then the SLA search per variant (ITL(c) = base + per_seq x c), CPU only."""
    _toolkit(session)
    session.run("patchbench", "show", "demo/sweep")
    session.run("patchbench", "sweep", "demo/sweep", "--sla", "itl_ms_median<=20.5", "-o", "patchbench-sweep",
                *session.posargs)


@nox.session(name="demo-track", python="3.11")
def demo_track(session: nox.Session) -> None:
    """Catch changes before anyone bisects: the miniature's releases 0.1.0..0.1.13 carry a planted 8%
    regression at concurrency 1 (0.1.5) and a planted 2x gain (0.1.10); `track` measures every release,
    `history` finds both change points (Apache Otava, in its own env) and bisects each to its commit."""
    _toolkit(session)
    releases = ROOT / ".patchbench" / "mini-releases-track"
    session.run("python", str(ROOT / "upstream" / "mini_releases.py"), str(releases), "--plant", "gain",
                "--at", "0.1.10", "--also", "slowdown8@0.1.5", "--releases", "14")
    env = {"PATCHBENCH_MINI_INDEX": str(releases / "index")}
    session.run("patchbench", "track", "demo/update", "--source", "sglang", "--releases", "--git",
                str(releases / "repo"), "--repeats", "2", env=env)
    session.run("patchbench", "history", "demo/update", "--metric", "output_tok_s@1", "--bisect", "--direction",
                "both", "--git", str(releases / "repo"), *session.posargs, env=env)
    meta = json.loads((releases / "releases.json").read_text())
    session.log(f"planted: {meta['planted']}")


@nox.session(python="3.11")
def compare(session: nox.Session) -> None:
    """`nox -s compare -- A B [C ...] [--run]`."""
    _toolkit(session)
    session.run("patchbench", "compare", *session.posargs)


@nox.session(python="3.11")
def bisect(session: nox.Session) -> None:
    """`nox -s bisect -- RECIPE --metric NAME[@point] [--source S --good REV --bad REV]`."""
    _toolkit(session)
    session.run("patchbench", "bisect", *session.posargs)


def _recipe_table(path: Path, seen: tuple = ()) -> dict:
    """The top-level keys of a recipe after `extends` (same rule as toolkit.recipe.load: names relative to
    recipes/, or ./ ../ paths relative to the file); patchbench itself validates everything else. A child
    without its own description is described as toolkit.recipe.load does: its parent plus what it sets."""
    data = tomllib.loads(path.read_text())
    parent = data.get("extends")
    if parent and path not in seen:
        p = (path.parent / parent) if parent.startswith(("./", "../")) else RECIPES / parent
        p = p.with_name(p.name + ".toml") if p.suffix != ".toml" else p
        if p.is_file():
            merged = {**_recipe_table(p, (*seen, path)), **{k: v for k, v in data.items() if k != "extends"}}
            if "description" not in data:
                merged["description"] = f"{_name(p)} + {_name(path)}: {_sets(data) or 'as it is'}"
            return merged
    return data


def _name(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(RECIPES).with_suffix(""))
    except ValueError:
        return path.stem


def _sets(table: dict, prefix: str = "") -> str:
    """The keys a recipe file sets, one phrase (patches as +NAME), for `nox -l`."""
    out = []
    for key, value in table.items():
        if key in ("extends", "description", "compare_to"):
            continue
        if isinstance(value, dict):
            inner = _sets(value, f"{prefix}{key}.")
            out += [inner] if inner else []
        elif prefix.startswith("patches.") and isinstance(value, list):
            out.append(", ".join(f"+{v}" for v in value))
        else:
            out.append(f"{prefix}{key} = {json.dumps(value)}")
    return "; ".join(out)


def _stops_before_store(posargs: list[str]) -> bool:
    """`-- --until STEP` (or `--until=STEP`) with a step before `store`: nothing to compare."""
    for i, arg in enumerate(posargs):
        value = posargs[i + 1] if arg == "--until" and i + 1 < len(posargs) else arg.partition("=")[2] \
            if arg.startswith("--until=") else None
        if value is not None:
            return value != "store"
    return False


def _recipe_session(name: str, description: str, compare_to: str | None, matrix: bool = False):
    def session_fn(session: nox.Session) -> None:
        _toolkit(session)
        if matrix:  # a recipe with [matrix]: its default configuration and every variant
            session.run("patchbench", "sweep", name, *session.posargs)
            return
        runs = [name] if not compare_to or compare_to == name else [compare_to, name]
        session.run("patchbench", "run", *runs, *session.posargs)
        if len(runs) > 1 and _stops_before_store(list(session.posargs)):
            session.log(f"stopped before `store` as asked: no runs to compare ({' vs '.join(runs)})")
        elif len(runs) > 1:
            session.run("patchbench", "compare", *runs)

    session_fn.__doc__ = description or f"recipe {name}"
    return session_fn


def _register_recipes() -> None:
    for path in sorted(RECIPES.rglob("*.toml")):
        name = str(path.relative_to(RECIPES).with_suffix(""))
        try:
            table = _recipe_table(path)
        except (tomllib.TOMLDecodeError, OSError):
            continue  # `patchbench` reports the error when the recipe is used
        compare_to = table.get("compare_to", "demo/baseline" if name.startswith("demo/") else "baseline")
        session_name = "recipe-" + name.replace("/", "-")
        nox.session(name=session_name, python="3.11")(
            _recipe_session(name, table.get("description", ""), compare_to, "matrix" in table)
        )


_register_recipes()
