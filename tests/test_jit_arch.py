"""The run's `jit-arch` step: what FlashInfer's JIT built during a launch holds the recipe's build.arch
(toolkit.run.jit_check, toolkit.run.jit_verdict).

The miniature stands in for FlashInfer's run-time JIT as sglang 0.5.23 drives it on SM120
(upstream/minisglang .../flashinfer_jit.py): FlashInfer reads the arch list when imported, sglang's
set_cuda_arch then sets FLASHINFER_CUDA_ARCH_LIST to "12.0a"; imported before (0.5.23's scheduler), the
recipe's list holds, imported after, the module is built for 12.0a. The real nvcc compiles the module
into the env's private cache, cuobjdump reads it."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from conftest import demo_project
from toolkit.cli import main
from toolkit.envs.steps import find_nvcc
from toolkit.envs.steps.fatbin import Holds
from toolkit.results.store import Store
from toolkit.run.jit_verdict import Module, verdict

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc (compiles the JIT module)")

SHORT = '[benchmark]\nconcurrency = [1]\nrepeats = 1\nnum_prompts = 4\noutput_len = 8\n'
KERNEL = "__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n"


def _recipe(proj: Path, name: str, *, arch: str, capability: str | None, late: bool = False) -> None:
    env = f'SGLANG_MINI_FLASHINFER_JIT = "{proj / "k.cu"}"\n'
    if capability:
        env += f'SGLANG_MINI_CUDA_CAPABILITY = "{capability}"\n'
    if late:
        env += 'SGLANG_MINI_FLASHINFER_IMPORT = "after"\n'
    (proj / f"recipes/t/{name}.toml").write_text(
        f'extends = "demo/baseline"\n[build]\narch = ["{arch}"]\n[server.env]\n{env}' + SHORT)


def _runs(home: Path) -> dict:
    return {r.recipe: r for r in Store(home / "results.sqlite").runs()}


@needs_nvcc
def test_a_module_built_for_another_arch_than_declared_makes_the_run_invalid(tmp_path, home, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/t").mkdir()
    (proj / "k.cu").write_text(KERNEL)
    _recipe(proj, "a", arch="12.0a", capability="12.0", late=True)  # set_cuda_arch's 12.0a is what was declared
    _recipe(proj, "f-reset", arch="12.0f", capability="12.0", late=True)  # FlashInfer imported after the reset
    _recipe(proj, "f", arch="12.0f", capability="12.0")  # imported before it, as in 0.5.23's scheduler

    assert main(["run", "t/a", "--fixed"]) == 0
    a = _runs(home)["t/a"]
    rec = a.extra["flashinfer_jit"]
    assert rec["declared"] == ["12.0a"] and rec["cache"].endswith("/jit/.cache/flashinfer")
    (mod,) = rec["modules"]
    assert mod == {"path": "0.7.2/120a/cached_ops/mini_k/mini_k.so", "sass": ["sm_120a"], "ptx": [],
                   "this_launch": True, "loaded": True, "pinned": None}
    assert rec["problems"] == []
    log = Path(rec["log"])
    assert "ELF file    1: mini_k.1.sm_120a.cubin" in log.read_text()

    capsys.readouterr()
    assert main(["run", "t/f-reset", "--fixed"]) == 1
    err = capsys.readouterr().err
    bad = _runs(home)["t/f-reset"]
    assert bad.status == "invalid"
    so = Path(bad.extra["flashinfer_jit"]["cache"]) / "0.7.2/120a/cached_ops/mini_k/mini_k.so"
    assert bad.error.startswith(f"step jit-arch: {so} holds SASS sm_120a: sm_120a not in the recipe's "
                                "build.arch 12.0f")
    assert f"[cuobjdump: {bad.log_paths['run_dir']}/flashinfer_jit.log]" in bad.error
    assert "t/f-reset repeat 0: INVALID: step jit-arch:" in " ".join(err.split())
    assert [s.metric for s in Store(home / "results.sqlite").samples(bad.run_id)]  # the numbers stay with it

    # the same env, FlashInfer imported before the reset: built for 12.0f; the 12.0a module the other
    # launch left is neither written nor loaded by this one: recorded, not judged
    assert main(["run", "t/f", "--fixed"]) == 0
    mods = {m["path"]: m for m in _runs(home)["t/f"].extra["flashinfer_jit"]["modules"]}
    assert mods["0.7.2/120f/cached_ops/mini_k/mini_k.so"]["sass"] == ["sm_120f"]
    assert mods["0.7.2/120f/cached_ops/mini_k/mini_k.so"]["this_launch"] is True
    assert mods["0.7.2/120a/cached_ops/mini_k/mini_k.so"]["loaded"] is False


@needs_nvcc
def test_a_module_older_than_the_env_is_a_stale_cache_one_this_launch_never_ran_is_not_judged(
        tmp_path, home, monkeypatch):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/t").mkdir()
    (proj / "k.cu").write_text(KERNEL)
    _recipe(proj, "a", arch="12.0a", capability=None)
    assert main(["run", "t/a", "--fixed"]) == 0
    first = _runs(home)["t/a"]
    cache = Path(first.extra["flashinfer_jit"]["cache"])
    so = cache / "0.7.2/120a/cached_ops/mini_k/mini_k.so"

    # another launch of this env (a recipe sharing it, other server settings) left a module for sm_120f
    other = cache / "0.7.2/120a/cached_ops/other/other.so"
    other.parent.mkdir(parents=True)
    subprocess.run([str(find_nvcc()), "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_120f,code=sm_120f",
                    str(proj / "k.cu"), "-o", str(other)], check=True)
    junk = cache / "0.7.2/120a/cached_ops/junk/junk.so"  # half-written by a concurrent launch
    junk.parent.mkdir(parents=True)
    junk.write_text("junk")
    assert main(["run", "t/a", "--fixed"]) == 0
    second = [r for r in Store(home / "results.sqlite").runs() if r.run_id != first.run_id][0]
    assert "Invalid fatbin header" in Path(second.extra["flashinfer_jit"]["log"]).read_text()
    mods = {m["path"].split("/")[-1]: m for m in second.extra["flashinfer_jit"]["modules"]}
    assert mods["other.so"]["sass"] == ["sm_120f"] and mods["other.so"]["loaded"] is False
    assert mods["mini_k.so"]["loaded"] is True and mods["mini_k.so"]["this_launch"] is False  # loaded as built
    assert second.extra["flashinfer_jit"]["problems"] == []

    manifest = json.loads((cache.parents[2] / "patchbench-env.json").read_text())  # <env>/jit/.cache/flashinfer
    old = datetime.fromisoformat(manifest["created_at"]).timestamp() - 3600
    os.utime(so, (old, old))  # a module carried in from elsewhere (cp -a, a restored cache): loaded as is
    assert main(["run", "t/a", "--fixed"]) == 1
    third = [r for r in Store(home / "results.sqlite").runs() if r.status == "invalid"][0]
    assert third.error.startswith(f"step jit-arch: {so} was written before this env was built: a stale "
                                  "FlashInfer JIT cache")


@needs_nvcc
def test_a_module_replaced_while_the_server_maps_it_is_judged_as_the_file_that_ran(tmp_path, home, monkeypatch):
    """The server dlopened a module built for sm_120a (FlashInfer imported after the reset, in a 12.0f recipe);
    while it serves, the .so at that path is replaced by one built for sm_120f (another launch of the env
    rebuilding it). /proc/<pid>/maps says "(deleted)": the step reads the file the server mapped, through
    /proc/<pid>/map_files, and refuses the run; the file now at the path is not what ran."""
    import signal
    import sys
    import time

    from conftest import REPO_ROOT

    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/t").mkdir()
    (proj / "k.cu").write_text(KERNEL)
    _recipe(proj, "f-reset", arch="12.0f", capability="12.0", late=True)
    path = proj / "recipes/t/f-reset.toml"  # 4 prompts x 256 tokens at 12 ms a step: seconds of serving
    path.write_text(path.read_text().replace("output_len = 8", "output_len = 256"))
    good = tmp_path / "good.so"  # what the same module holds built for the recipe's 12.0f
    subprocess.run([str(find_nvcc()), "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_120f,code=sm_120f",
                    str(proj / "k.cu"), "-o", str(good)], check=True)
    log = tmp_path / "run.log"
    with log.open("w") as out:
        cli = subprocess.Popen([sys.executable, "-m", "toolkit", "run", "t/f-reset", "--fixed"], cwd=proj,
                               env={**os.environ, "PATCHBENCH_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)},
                               stdout=subprocess.DEVNULL, stderr=out)
    try:
        deadline = time.monotonic() + 300
        while "server ready" not in log.read_text() and time.monotonic() < deadline and cli.poll() is None:
            time.sleep(0.05)
        assert "server ready" in log.read_text(), log.read_text()
        [so] = (home / "envs").glob("*/jit/.cache/flashinfer/0.7.2/120a/cached_ops/mini_k/mini_k.so")
        tmp = so.with_name("mini_k.so.new")
        tmp.write_bytes(good.read_bytes())
        os.replace(tmp, so)  # mid-benchmark: the path now holds sm_120f, the server still runs sm_120a
        assert cli.wait(timeout=300) == 1, log.read_text()
    finally:
        if cli.poll() is None:
            cli.send_signal(signal.SIGINT)
            cli.wait(timeout=60)
    run = _runs(home)["t/f-reset"]
    assert run.status == "invalid", (run.status, run.error)
    assert run.error.startswith(f"step jit-arch: {so} (replaced since the server mapped it: its mapped file, "
                                "/proc/"), run.error
    assert "holds SASS sm_120a: sm_120a not in the recipe's build.arch 12.0f" in run.error
    mods = run.extra["flashinfer_jit"]["modules"]
    ran = [m for m in mods if m.get("replaced")]
    assert [m["sass"] for m in ran] == [["sm_120a"]] and ran[0]["loaded"] is True
    now = [m for m in mods if not m.get("replaced")]  # the file at the path now: recorded, not what ran
    assert [(m["sass"], m["loaded"]) for m in now] == [(["sm_120f"], False)]


@pytest.mark.slow
@needs_nvcc
def test_a_profile_run_is_checked_the_same_way(tmp_path, home, monkeypatch, capsys):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes/t").mkdir()
    (proj / "k.cu").write_text(KERNEL)
    (proj / "recipes/t/tf.toml").write_text(
        f'extends = "demo/torch-baseline"\n[build]\narch = ["12.0f"]\n[server.env]\n'
        f'SGLANG_MINI_FLASHINFER_JIT = "{proj / "k.cu"}"\nSGLANG_MINI_CUDA_CAPABILITY = "12.0"\n'
        'SGLANG_MINI_FLASHINFER_IMPORT = "after"\n')
    assert main(["profile", "t/tf", "--steps", "5"]) == 1
    assert "stored INVALID: step jit-arch:" in " ".join(capsys.readouterr().err.split())
    [run] = Store(home / "results.sqlite").runs(recipe="t/tf")
    assert run.status == "invalid" and run.extra["kind"] == "profile"
    assert "holds SASS sm_120a: sm_120a not in the recipe's build.arch 12.0f" in run.error
    assert [m["sass"] for m in run.extra["flashinfer_jit"]["modules"]] == [["sm_120a"]]


def test_the_verdict_judges_list_following_modules_only():
    """Pure: a module FlashInfer pins to its own arch (fp4_quantization_120f holds sm_120f in every
    recipe) is not judged; a list-following one may hold only declared arches, not necessarily all."""
    f = Holds(frozenset({"sm_120f"}), frozenset())
    a = Holds(frozenset({"sm_120a"}), frozenset())
    ptx = Holds(frozenset({"sm_120f"}), frozenset({"sm_120a"}))
    assert verdict([Module("q.so", "fp4_quantization_120f", f, 10.0)], ["12.0a"], 1.0) == []
    assert verdict([Module("g.so", "gemm_sm120", f, 10.0)], ["12.0f", "9.0a"], 1.0) == []
    (problem,) = verdict([Module("g.so", "gemm_sm120", a, 10.0)], ["12.0f"], 1.0)
    assert problem.startswith("g.so holds SASS sm_120a: sm_120a not in the recipe's build.arch 12.0f")
    (problem,) = verdict([Module("g.so", "gemm_sm120", ptx, 10.0)], ["12.0f"], 1.0)
    assert problem.startswith("g.so holds SASS sm_120f; PTX sm_120a: sm_120a not in")
    assert verdict([Module("g.so", "gemm_sm120", a, 10.0)], [], 1.0) == []  # FlashInfer chose from the device
    assert verdict([Module("g.so", "gemm_sm120", a, 10.0, used=False)], ["12.0f"], 1.0) == []  # not this launch's
    (stale,) = verdict([Module("q.so", "fp4_quantization_120f", f, 0.5)], ["12.0a"], 1.0)
    assert "written before this env was built" in stale
