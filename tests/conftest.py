"""Shared fixtures: real git repos, recipe trees and an isolated PATCHBENCH_HOME per test."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from filelock import FileLock

# The CLI's tables and paths as on a wide terminal, in every worker: pytest-xdist's workers get
# COLUMNS=80, where the long tmp paths wrap and what a test finds in the output would depend on it.
os.environ["COLUMNS"] = "200"

from toolkit.tree.applied import AppliedTree

REPO_ROOT = Path(__file__).resolve().parent.parent
MINI_PY = REPO_ROOT / "upstream" / "minisglang" / "python"
# Downloads and base venvs the tests keep between runs (CI keeps them for one run).
# The tests' shared cache (releases, envs, downloads): PATCHBENCH_TEST_CACHE (PATCHBENCH_TEST_HOME, the name
# some tests read, is the same place), else ~/.cache/patchbench-test. One definition, every test reads it.
TEST_CACHE = Path(os.environ.get("PATCHBENCH_TEST_CACHE") or os.environ.get("PATCHBENCH_TEST_HOME")
                  or Path.home() / ".cache" / "patchbench-test")


def _load_mini_test_utils():
    """The miniature's own launch helpers (sglang/test/test_utils.py), loaded without installing it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("minisglang_test_utils",
                                                  MINI_PY / "sglang" / "test" / "test_utils.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


mini_tu = _load_mini_test_utils()


def patched_mini(dest: Path, old: str, new: str) -> Path:
    """A copy of the miniature's python/ with one line of its cost model changed (a real patch)."""
    shutil.copytree(MINI_PY, dest, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    cost = dest / "sglang" / "srt" / "model_executor" / "cost.py"
    text = cost.read_text()
    assert old in text
    cost.write_text(text.replace(old, new))
    return dest


def mini_env(pythonpath: Path = MINI_PY) -> dict:
    """The environment for a miniature server run from source: no inherited PYTHONPATH or crash knob."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGLANG_MINI_CRASH_AFTER_REQUESTS")}
    env["PYTHONPATH"] = str(pythonpath)
    return env


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow") or os.environ.get("PATCHBENCH_SLOW") == "1":
        # The slow tests (minutes each: real artifacts, compiles) first, so that parallel workers
        # do not start one when the rest of the suite is nearly done (a stable sort: same order in
        # every xdist worker).
        items.sort(key=lambda item: "slow" not in item.keywords)
        return
    skip = pytest.mark.skip(reason="slow: run with --slow (CI does)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def git_run(cwd, *args) -> subprocess.CompletedProcess:
    """`git ARGS` in `cwd` as a test user would run it (identity t <t@t>, branch main, no autocrlf);
    the completed process, whatever its exit status. The tests' one git helper, with `git`."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "core.autocrlf=false", *args],
                          cwd=cwd, env=env, capture_output=True, text=True)


def git(cwd, *args) -> str:
    """`git ARGS` in `cwd` that must succeed; its stdout, stripped."""
    proc = git_run(cwd, *args)
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def run_dir(tmp_path_factory) -> Path:
    """The test run's own temp directory, shared by its pytest-xdist workers (pytest-N, removed with
    pytest's old runs); the worker's basetemp without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def run_ccache(tmp_path_factory) -> Path:
    """One compiler cache for every `home` of the test run, as one PATCHBENCH_HOME shares it across
    envs: the miniature's two CUDA files cost ~1 CPU-s of nvcc each, paid once per run instead of in
    every test that builds an env (a hit: 0.07 s). ccache is safe for concurrent builds; a test that
    counts hits and misses keeps a cache of its own (test_build's `pb_home`)."""
    d = run_dir(tmp_path_factory) / "ccache"
    d.mkdir(exist_ok=True)
    return d


@pytest.fixture(scope="session")
def run_wheels(tmp_path_factory) -> Path:
    """One wheel cache (PATCHBENCH_HOME/wheels) for every `home` of the test run, as one
    PATCHBENCH_HOME shares it across envs: a wheel is keyed by all that built it (tree hash, build
    settings, interpreter, uv, sources; toolkit/envs/steps/wheel_cache.py), so the miniature's wheel
    is built once per run, not by every test that builds its env (`uv build` in an isolated build env:
    ~1 CPU-s and 4-8 s each on a 2-core box; a hit: nothing). A failed build is never cached; a test
    that asserts a build or a cache hit keeps a home of its own (test_envs' `pb_home`)."""
    d = run_dir(tmp_path_factory) / "wheels"
    d.mkdir(exist_ok=True)
    return d


@pytest.fixture(scope="session")
def run_toolchain(tmp_path_factory) -> Path:
    """One PATCHBENCH_HOME/toolchain (cuobjdump from PyPI, set up under its own lock) for every `home`
    of the test run: installed once per run instead of once per test that builds an env."""
    d = run_dir(tmp_path_factory) / "toolchain"
    d.mkdir(exist_ok=True)
    return d


RUN_CACHES = ("ccache", "wheels", "toolchain")  # run_ccache, run_wheels, run_toolchain


def link_run_caches(home: Path, tmp_path_factory) -> Path:
    """`home`'s compiler cache, wheel cache and toolchain dir as the test run's (the fixtures above):
    for a module fixture's own PATCHBENCH_HOME, as the `home` fixture has them."""
    for name in RUN_CACHES:
        shared = run_dir(tmp_path_factory) / name
        shared.mkdir(exist_ok=True)
        (home / name).symlink_to(shared, target_is_directory=True)
    return home


@pytest.fixture
def home(tmp_path, tmp_path_factory, monkeypatch, run_ccache, run_wheels, run_toolchain):
    h = tmp_path / "home"
    h.mkdir()
    link_run_caches(h, tmp_path_factory)
    monkeypatch.setenv("PATCHBENCH_HOME", str(h))
    return h


class Project:
    """A scratch project: recipes/, patches/ and an upstream git repo with python/<pkg>/."""

    def __init__(self, root: Path):
        self.root = root
        self.recipes = root / "recipes"
        self.patches = root / "patches"
        self.upstream = root / "upstream"
        self.recipes.mkdir(parents=True)
        self.patches.mkdir()
        self.upstream.mkdir()
        git(self.upstream, "init", "-q")
        self.write_upstream("python/mini/__init__.py", "VERSION = '1'\n")
        self.write_upstream("python/mini/cost.py", "STEP_MS = 10\nPREFILL_MS = 1\nNAME = 'mini'\n")
        self.write_upstream("python/pyproject.toml", "[project]\nname='mini'\nversion='1'\n")
        self.commit("base")
        git(self.upstream, "tag", "v1")

    def write_upstream(self, rel: str, text: str) -> None:
        p = self.upstream / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def commit(self, msg: str) -> str:
        git(self.upstream, "add", "-A")
        git(self.upstream, "commit", "-q", "-m", msg)
        return git(self.upstream, "rev-parse", "HEAD")

    def patch(self, name: str, text: str) -> Path:
        p = self.patches / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))
        return p

    def recipe(self, name: str, text: str) -> Path:
        p = self.recipes / f"{name}.toml"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n").replace("@UPSTREAM@", str(self.upstream)))
        return p


class Upstream:
    """A git repo holding an installable package (`minipkg`, a console script) and two CUDA sources."""

    def __init__(self, root: Path, *, dist: str = "minipkg", package: str = "minipkg"):
        self.root = root
        root.mkdir(parents=True)
        git(root, "init", "-q")
        self.write("pyproject.toml", f"""
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "{dist}"
            version = "0.1.0"
            [project.scripts]
            {package}-hello = "{package}:hello"
            [tool.setuptools]
            packages = ["{package}"]
            """)
        self.write(f"{package}/__init__.py", "VALUE = 1\ndef hello():\n    print('hello', VALUE)\n")
        self.write("csrc/a.cu", "__global__ void a_kernel(float* x) { x[threadIdx.x] += 1.0f; }\n")
        self.write("csrc/b.cu", "__global__ void b_kernel(float* x) { x[threadIdx.x] *= 2.0f; }\n")
        self.commit("base")

    def write(self, rel: str, text: str) -> None:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))

    def commit(self, msg: str = "change") -> None:
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "-m", msg)

    def tree(self, source: str = "mini", *, layout: str = "git", package_dir: str = "") -> AppliedTree:
        return AppliedTree.at_head(source, self.root, layout=layout, package_dir=package_dir)


@pytest.fixture
def upstream(tmp_path) -> Upstream:
    return Upstream(tmp_path / "upstream")


@pytest.fixture
def project(tmp_path, home):
    return Project(tmp_path / "proj")


# The miniature as a demo project's sglang source, served on the CPU (a recipe written under the
# `demo_project` fixture's recipes/<dir>/): tests add [server.args], [benchmark], [matrix].
MINI_SERVED = """[sources.sglang]
path = "../../upstream/minisglang"
package_dir = "python"
[build]
mode = "full"
[server]
model = "minisglang/tiny"
gpus = 0
timeout_s = 60
"""


# A recipe over the `project` fixture's upstream (@UPSTREAM@ is its path): tests append tables.
MINI_RECIPE = """
description = "base"
[sources.mini]
git = "@UPSTREAM@"
rev = "v1"
package_dir = "python"
[server.args]
tp-size = 2
[benchmark]
concurrency = [1, 2]
"""


def change(old: str, new: str, path: str = "python/mini/cost.py", context: tuple[str, ...] = ()) -> str:
    """A one-line unified diff against the fixture's files (git layout)."""
    return f"""\
        Subject: {old} -> {new}

        diff --git a/{path} b/{path}
        --- a/{path}
        +++ b/{path}
        @@ -1,3 +1,3 @@
        -{old}
        +{new}
         {context[0] if context else "PREFILL_MS = 1"}
         {context[1] if len(context) > 1 else "NAME = 'mini'"}
        """


READY = ".patchbench-ready"  # written last into a cached venv: its install finished


def cached_venv(root: Path, requirements: list[str], *, timeout_s: float | None = None) -> Path:
    """A relocatable venv at `root` with `requirements` installed from this machine's pip sources,
    built once however many test processes ask (toolkit.build_once: a lock, a temporary directory,
    one rename); its install log is `install.log` inside. pytest.skip (pytest.fail under
    PATCHBENCH_REQUIRE_TORCH=1) when it cannot be installed, naming the log."""
    from toolkit.build_once import build_once
    from toolkit.envs import pip_sources, uv_bin

    def build(tmp: Path) -> None:
        uv = uv_bin()
        subprocess.run([uv, "venv", "-q", "--no-config", "--relocatable", "--python", sys.executable, str(tmp)],
                       check=True, capture_output=True)
        log = tmp / "install.log"
        try:
            out = subprocess.run([uv, "pip", "install", "--no-config", "--python", str(tmp / "bin" / "python"),
                                  *pip_sources().uv_install_args(), *requirements],
                                 capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _unavailable(f"installing {' '.join(requirements)[:200]} took over {timeout_s} s")
        log.write_text(out.stdout + out.stderr)
        if out.returncode != 0:
            kept = root.parent / f"{root.name}.failed-install.log"
            shutil.copy2(log, kept)
            _unavailable(f"cannot install {' '.join(requirements)[:200]} here (log {kept}): {out.stderr[-400:]}")
        (tmp / READY).write_text("\n".join(requirements) + "\n")

    def complete(d: Path) -> bool:
        ready = d / READY
        return (d / "bin" / "python").exists() and ready.is_file() and \
            ready.read_text().split() == requirements

    build_once(root, build, complete=complete)
    return root / "bin" / "python"


def _unavailable(message: str):
    if os.environ.get("PATCHBENCH_REQUIRE_TORCH") == "1":
        pytest.fail(message)
    pytest.skip(message)


def base_torch_python() -> Path:
    """A venv with torch 2.13.0 (CPU) from this machine's pip sources, cached across runs."""
    return cached_venv(TEST_CACHE / "base-torch-2.13.0", ["torch==2.13.0+cpu"])


def pypi_download(args: list[str], pattern: str) -> Path:
    """The one file matching `pattern` that `pip download --no-deps ARGS` brings, cached under
    TEST_CACHE/downloads (built once for concurrent callers, as cached_venv); skips when PyPI
    cannot give it."""
    from toolkit.build_once import build_once

    slug = re.sub(r"[^A-Za-z0-9.=_-]+", "_", "_".join(args)).strip("_")[:120]

    def build(tmp: Path) -> None:
        out = pip_download(args, tmp)
        if out.returncode != 0:
            tail = (out.stderr or out.stdout).strip().splitlines()[-1:]
            pytest.skip(f"pip download {' '.join(args)} failed: {tail}")

    dest = build_once(TEST_CACHE / "downloads" / slug, build, complete=lambda d: len(list(d.glob(pattern))) == 1)
    (found,) = dest.glob(pattern)
    return found


def cli_json(capsys, argv: list[str]) -> tuple[int, dict]:
    """`patchbench ARGV --json` in this process: its exit code and the JSON it printed."""
    from toolkit.cli import main

    capsys.readouterr()
    rc = main([*argv, "--json"])
    cap = capsys.readouterr()
    assert cap.out.strip(), f"{' '.join(argv)} printed no JSON (exit {rc}): {cap.err[-1500:]}"
    return rc, json.loads(cap.out)


def once_per_run(tmp_path_factory, name: str, produce):
    """`produce()` (a JSON value) computed once per test run however many pytest-xdist workers ask:
    the first computes it under a FileLock in the run's own temp directory (shared by its workers),
    the others read it. Nothing outlives the run: every run computes it afresh."""
    path = run_dir(tmp_path_factory) / f"once-{name}.json"  # workers: pytest-N/popen-gwK
    with FileLock(str(path) + ".lock"):
        if path.is_file():
            return json.loads(path.read_text())
        value = produce()
        path.write_text(json.dumps(value))
        return value


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory) -> Path:
    """A venv of this Python with nothing installed (no torch, whatever the test runner's env has):
    the stdlib-only miniature runs there as on a machine without the optional packages."""
    from toolkit.envs import uv_bin

    root = tmp_path_factory.mktemp("bare-venv")
    subprocess.run([uv_bin(), "venv", "-q", "--no-config", "--clear", "--python", sys.executable, str(root)],
                   check=True)
    py = root / "bin" / "python"
    assert subprocess.run([str(py), "-c", "import torch"], capture_output=True).returncode != 0
    return py


def interrupt_launches_after(monkeypatch, n: int) -> list[str]:
    """Ctrl-C (KeyboardInterrupt) at the launch after the first `n` of `toolkit.run.pipeline.run_once`:
    a campaign killed part-way. Returns the run ids of the launches that completed (filled as they do);
    `monkeypatch.undo()` or setting run_once back restores the real one."""
    import toolkit.run.pipeline as pipeline

    real, launched = pipeline.run_once, []

    def interrupted(*a, **kw):
        if len(launched) >= n:
            raise KeyboardInterrupt
        launched.append(real(*a, **kw))
        return launched[-1]

    monkeypatch.setattr(pipeline, "run_once", interrupted)
    return launched


def demo_project(tmp_path: Path, monkeypatch) -> Path:
    """A scratch project holding the demo recipes, their patches and the miniature, as a user's own
    clone would (the current directory; recipes/ found from there)."""
    proj = tmp_path / "proj"
    for part in ("recipes/demo", "patches/demo", "upstream/minisglang"):
        shutil.copytree(REPO_ROOT / part, proj / part, ignore=shutil.ignore_patterns("*.lock.json", "__pycache__"))
    monkeypatch.chdir(proj)
    monkeypatch.delenv("PATCHBENCH_RECIPES", raising=False)
    return proj


def shrink_demo_benchmark(proj: Path, benchmark: str, *, quality_count: int | None = None) -> None:
    """demo/baseline's [benchmark] table in the `demo_project` at `proj` replaced by `benchmark` (its
    lines, without the header), and its output check asked of `quality_count` prompts instead of 16:
    for tests whose assertions do not depend on the demo's full workload (3 points of 8-64 requests of
    32 tokens at a 12 ms decode step: ~8 s a launch, ~1.5 s more for the output check)."""
    base = proj / "recipes" / "demo" / "baseline.toml"
    head, rest = base.read_text().split("[benchmark]", 1)
    rest = rest[rest.index("\n[", 1):]
    if quality_count is not None:
        assert "\ncount = 16\n" in rest
        rest = rest.replace("\ncount = 16\n", f"\ncount = {quality_count}\n")
    base.write_text(head + "[benchmark]\n" + benchmark.strip("\n") + "\n" + rest)


def pip_download(args: list[str], dest: Path) -> subprocess.CompletedProcess:
    """`pip download --no-deps -d DEST ARGS` with the first pip there is: this interpreter's, else
    one on PATH (a uv-made test venv has no pip; pip reads the machine's sources, which uv does not)."""
    pips = [[sys.executable, "-m", "pip"]] + [[p] for p in (shutil.which("pip3"), shutil.which("pip")) if p]
    out = None
    for pip in pips:
        out = subprocess.run([*pip, "download", "--no-deps", "-d", str(dest), *args], capture_output=True, text=True)
        if out.returncode == 0:
            return out
    return out


@pytest.fixture(scope="session")
def pg_server():
    """One real PostgreSQL cluster for the test run (tests/postgres_server.py), shared by the xdist
    workers. Missing PostgreSQL skips outside CI (saying why) and fails in CI (`CI` set)."""
    import tempfile

    import postgres_server

    why = postgres_server.unavailable()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs PostgreSQL for the store tests: {why}")
        pytest.skip(why)
    run = re.sub(r"\W", "", os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"solo{os.getpid()}")[:16]
    server = postgres_server.shared_server(Path(tempfile.gettempdir()) / f"patchbench-pg-{run}")
    yield server
    postgres_server.release(server)


@pytest.fixture
def pg_url(pg_server):
    """A fresh database on the shared cluster, as a store URL (postgresql://...)."""
    import postgres_server

    return postgres_server.new_database(pg_server)
