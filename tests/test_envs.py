"""Envs: identity, reuse, invalidation, atomic publish under kill -9, overlay mode, list/gc.

Real uv, real git, real interpreters; a miniature upstream (a Python package and two .cu files)
stands in for sglang/FlashInfer. The overlay tests use a base venv holding torch 2.13.0 (CPU),
built once and cached under ~/.cache/patchbench-test.
"""

from __future__ import annotations

from toolkit.cli import main  # noqa: E402

import io
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from argparse import Namespace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from rich.console import Console

from conftest import Upstream, base_torch_python
from toolkit import envs
from toolkit.envs import (
    BuildSpec,
    PipSources,
    Toolchain,
    ensure_env,
    env_key,
    find_env,
    gc_envs,
    list_envs,
    pip_sources,
)
from toolkit.errors import BadInput, PatchbenchError
from toolkit.tree.applied import AppliedTree

REPO = Path(__file__).resolve().parent.parent
HAVE_NVCC = envs.find_nvcc() is not None


# --------------------------------------------------------------------------------------------
# helpers (the git helper and the `upstream` fixture are in conftest.py)
# --------------------------------------------------------------------------------------------


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


def text_of(console: Console) -> str:
    return console.file.getvalue()


def run_py(env, code: str) -> str:
    out = subprocess.run([str(env.python), "-c", code], capture_output=True, text=True,
                         env=env.run_environ())
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.fixture
def pb_home(tmp_path) -> Path:
    h = tmp_path / "pbhome"
    h.mkdir()
    return h


FAKE_TOOLCHAIN = Toolchain(
    python={"version": "3.11.7", "implementation": "CPython", "real_executable": "/py",
            "executable": "/py", "site_dirs": ["/base/site-packages"], "dists": ["torch==2.13.0"],
            "dists_sha256": "d" * 64, "torch": {"version": "2.13.0+cpu", "cuda": None}},
    nvcc="/usr/local/cuda/bin/nvcc", nvcc_version="release 13.0, V13.0.88", cuda_home="/usr/local/cuda",
    uv="uv")


# --------------------------------------------------------------------------------------------
# identity (pure)
# --------------------------------------------------------------------------------------------


def test_env_key_is_stable_and_sensitive(upstream):
    tree = upstream.tree()
    sources = PipSources(find_links=("/opt/wheels",))
    spec = BuildSpec(arch=("12.0a",), env=(("A", "1"),), packages=("torch==2.13.0",))
    key = env_key([tree], spec, FAKE_TOOLCHAIN, sources)
    assert key == env_key([tree], spec, FAKE_TOOLCHAIN, sources)
    assert len(key) == 64

    # one byte of the tree
    upstream.write("minipkg/__init__.py", "VALUE = 2\ndef hello():\n    print('hello', VALUE)\n")
    upstream.commit()
    assert env_key([upstream.tree()], spec, FAKE_TOOLCHAIN, sources) != key
    # one flag, one arch, one env var, one package, one source
    changed = [
        BuildSpec(arch=("12.0f",), env=(("A", "1"),), packages=("torch==2.13.0",)),
        BuildSpec(arch=("12.0a",), env=(("A", "2"),), packages=("torch==2.13.0",)),
        BuildSpec(arch=("12.0a",), env=(("A", "1"),), packages=("torch==2.13.1",)),
        BuildSpec(arch=("12.0a",), env=(("A", "1"),), packages=("torch==2.13.0",), nvcc_flags=("-O2",)),
        BuildSpec(arch=("12.0a",), env=(("A", "1"),), packages=("torch==2.13.0",), editable=True),
    ]
    keys = {env_key([tree], s, FAKE_TOOLCHAIN, sources) for s in changed}
    assert len(keys) == len(changed) and key not in keys
    assert env_key([tree], spec, FAKE_TOOLCHAIN, PipSources(find_links=("/elsewhere",))) != key
    # the toolchain: nvcc, Python
    other_nvcc = Toolchain(**{**FAKE_TOOLCHAIN.__dict__, "nvcc_version": "release 12.9"})
    assert env_key([tree], spec, other_nvcc, sources) != key
    # parallelism is not identity
    assert env_key([tree], BuildSpec(arch=("12.0a",), env=(("A", "1"),), packages=("torch==2.13.0",),
                                     jobs=7), FAKE_TOOLCHAIN, sources) == key


def test_sgl_kernel_fetchcontent_seeds_are_identity(upstream, tmp_path):
    tree, spec = upstream.tree(), BuildSpec()
    seed = Upstream(tmp_path / "cutlass")
    key = env_key([tree], spec, FAKE_TOOLCHAIN, PipSources(), fetchcontent={"repo-cutlass": seed.root})
    assert key != env_key([tree], spec, FAKE_TOOLCHAIN, PipSources())
    seed.write("csrc/a.cu", "// patched cutlass\n")
    seed.commit()
    assert key != env_key([tree], spec, FAKE_TOOLCHAIN, PipSources(),
                          fetchcontent={"repo-cutlass": seed.root})


def test_overlay_key_includes_base_torch_and_packages(upstream):
    tree = upstream.tree()
    spec = BuildSpec(mode="overlay", base_python="/py")
    key = env_key([tree], spec, FAKE_TOOLCHAIN, PipSources())
    py = dict(FAKE_TOOLCHAIN.python)
    for change in ({"torch": {"version": "2.14.1", "cuda": "13.0"}}, {"dists_sha256": "e" * 64}):
        tc = Toolchain(**{**FAKE_TOOLCHAIN.__dict__, "python": {**py, **change}})
        assert env_key([tree], spec, tc, PipSources()) != key


def test_pip_sources_follow_pip_configuration(tmp_path, monkeypatch):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "x-1-py3-none-any.whl").write_text("")
    (tmp_path / "c.txt").write_text("torch<=2.14.1\n")
    conf = tmp_path / "pip.conf"
    conf.write_text(textwrap.dedent(f"""
        [global]
        find-links = {tmp_path / 'wheels'}
        extra-index-url = file:///idx/a
            file:///idx/b
        constraint = {tmp_path / 'c.txt'}
        [install]
        index-url = https://example.invalid/simple
        """))
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    s = pip_sources()
    assert s.find_links[-1] == str(tmp_path / "wheels") and len(set(s.find_links)) == len(s.find_links)
    assert s.extra_index_urls[-2:] == ("file:///idx/a", "file:///idx/b")
    assert str(tmp_path / "c.txt") in s.constraints
    assert s.index_url == "https://example.invalid/simple"
    args = s.uv_install_args()
    assert ["--find-links", str(tmp_path / "wheels")] == args[args.index("--find-links"):][:2]
    assert "--constraint" in args and "--build-constraints" in s.uv_build_args()
    ident = s.identity()
    assert ident["find_links"][str(tmp_path / "wheels")] == ["x-1-py3-none-any.whl"]
    assert len(ident["constraints"][str(tmp_path / "c.txt")]) == 64

    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # pip: no configuration files at all
    monkeypatch.delenv("PIP_FIND_LINKS")
    for k in list(os.environ):
        if k.startswith("PIP_") and k != "PIP_CONFIG_FILE":
            monkeypatch.delenv(k)
    assert pip_sources() == PipSources(origin=())


def test_bad_settings_are_bad_input(upstream, pb_home):
    tree = upstream.tree()
    for spec, words in [
        (BuildSpec(mode="layered"), "build.mode"),
        (BuildSpec(mode="overlay"), "base_python"),
        (BuildSpec(arch=("sm_120",)), "12.0a"),
        (BuildSpec(install=("nope",)), "nope"),
        (BuildSpec(cuda=(("mini", ("csrc/*.cu",)),)), "build.arch"),
    ]:
        with pytest.raises(BadInput, match=words):
            ensure_env([tree], spec, pb_home, console=quiet())
    assert not (pb_home / "envs").exists() or not list_envs(pb_home)


# --------------------------------------------------------------------------------------------
# reuse, invalidation, atomic publish
# --------------------------------------------------------------------------------------------


def test_reuse_is_zero_work_and_any_change_is_a_new_env(upstream, pb_home, monkeypatch):
    spec = BuildSpec(env=(("PB_TEST", "1"),))
    c = quiet()
    env1 = ensure_env([upstream.tree()], spec, pb_home, recipe="r1", console=c)
    assert not env1.reused
    assert env1.path == pb_home / "envs" / env1.key[:16]
    assert (env1.path / envs.MANIFEST).is_file()
    assert run_py(env1, "import minipkg, sys; print(minipkg.VALUE, sys.prefix)") == f"1 {env1.path}"
    # console scripts work after the publishing rename (relocatable venv)
    hello = subprocess.run([str(env1.path / "bin" / "minipkg-hello")], capture_output=True, text=True)
    assert hello.stdout.strip() == "hello 1", hello.stderr
    assert not list((pb_home / "envs").glob(".tmp-*"))
    m = env1.manifest
    assert m["key"] == env1.key and m["recipes"] == ["r1"]
    assert "minipkg==0.1.0" in m["packages"]
    assert m["inputs"]["trees"]["mini"]["tree_hash"] == upstream.tree().tree_hash
    assert m["installed"][0]["dist"] == "minipkg" and len(m["installed"][0]["sha256"]) == 64
    assert {"venv", "build-mini", "install", "freeze"} <= set(m["logs"])
    assert all((env1.path / p).is_file() for p in m["logs"].values())
    assert m["env_vars"] == {"PB_TEST": "1"} and m["created_at"] and m["last_used_at"]

    # same key: reused with zero work (building anything would fail here)
    def no_build(*a, **k):
        raise AssertionError("a reused env must not build")

    monkeypatch.setattr(envs.lifecycle, "_build", no_build)
    c2 = quiet()
    t0 = time.monotonic()
    env2 = ensure_env([upstream.tree()], spec, pb_home, recipe="r2", console=c2)
    assert time.monotonic() - t0 < 2.0
    assert env2.reused and env2.key == env1.key and env2.path == env1.path
    assert "reused" in text_of(c2)
    assert env2.manifest["recipes"] == ["r1", "r2"]
    assert find_env(pb_home, env1.key).manifest["recipes"] == ["r1", "r2"]
    monkeypatch.undo()

    # one byte in the tree: a new env, and the old one is untouched
    upstream.write("minipkg/__init__.py", "VALUE = 2\ndef hello():\n    print('hello', VALUE)\n")
    upstream.commit()
    env3 = ensure_env([upstream.tree()], spec, pb_home, recipe="r1", console=quiet())
    assert not env3.reused and env3.key != env1.key
    assert run_py(env3, "import minipkg; print(minipkg.VALUE)") == "2"
    assert run_py(env1, "import minipkg; print(minipkg.VALUE)") == "1"
    # one build setting: a new env
    env4 = ensure_env([upstream.tree()], BuildSpec(env=(("PB_TEST", "2"),)), pb_home, console=quiet())
    assert not env4.reused and env4.key not in (env1.key, env3.key)
    assert len(list_envs(pb_home)) == 3


def test_a_second_env_reuses_the_wheel_built_from_the_same_tree(upstream, pb_home):
    env1 = ensure_env([upstream.tree()], BuildSpec(), pb_home, console=quiet())
    # nvcc_flags change the env key but not what `uv build` makes of the tree
    c = quiet()
    env2 = ensure_env([upstream.tree()], BuildSpec(nvcc_flags=("-lineinfo",)), pb_home, console=c)
    assert not env2.reused and env2.key != env1.key
    w1, w2 = env1.manifest["installed"][0], env2.manifest["installed"][0]
    assert (w1["cached"], w2["cached"]) == (False, True)
    assert w2["sha256"] == w1["sha256"] and w2["wheel"] == w1["wheel"]
    assert "from the cache" in text_of(c)
    assert "uv build" not in (env2.path / env2.manifest["logs"]["build-mini"]).read_text()
    assert "minipkg==0.1.0" in env2.manifest["packages"]
    assert run_py(env2, "import minipkg; print(minipkg.VALUE)") == "1"
    # one byte in the tree: a new wheel, built
    upstream.write("minipkg/__init__.py", "VALUE = 3\n")
    upstream.commit()
    env3 = ensure_env([upstream.tree()], BuildSpec(), pb_home, console=quiet())
    assert env3.manifest["installed"][0]["cached"] is False
    assert run_py(env3, "import minipkg; print(minipkg.VALUE)") == "3"


def test_uncommitted_files_in_the_tree_never_reach_the_env(upstream, pb_home):
    (upstream.root / "minipkg" / "stray.py").write_text("X = 1\n")  # untracked
    env = ensure_env([upstream.tree()], BuildSpec(), pb_home, console=quiet())
    assert run_py(env, "import importlib.util as u; print(u.find_spec('minipkg.stray'))") == "None"
    assert not (upstream.root / "build").exists()  # the build never writes into the tree


def test_run_environ(upstream, pb_home):
    spec = BuildSpec(arch=("12.0a", "9.0a"), env=(("SGLANG_X", "on"),))
    env = ensure_env([upstream.tree()], spec, pb_home, console=quiet())
    e = env.run_environ({"PATH": "/usr/bin", "PYTHONPATH": "/evil"})
    assert e["VIRTUAL_ENV"] == str(env.path)
    assert e["PATH"].split(os.pathsep)[:2] == [str(env.path / "bin"), "/usr/bin"]
    assert e["FLASHINFER_WORKSPACE_BASE"] == str(env.path / "jit")
    # sglang 0.5.23 would put Triton, Inductor, PTX and TileLang caches in ~/.cache/sglang, shared by
    # every variant; older sglang leaves them in ~/.triton, /tmp: all under the env's jit/ instead
    assert e["SGLANG_CACHE_DIR"] == str(env.path / "jit")
    assert e["TRITON_CACHE_DIR"] == str(env.path / "jit" / "triton")
    assert e["TORCHINDUCTOR_CACHE_DIR"] == str(env.path / "jit" / "inductor")
    assert e["CUDA_CACHE_PATH"] == str(env.path / "jit" / "nv")
    assert e["FLASHINFER_CUDA_ARCH_LIST"] == "12.0a 9.0a"
    assert e["TORCH_CUDA_ARCH_LIST"] == "12.0a;9.0a"
    assert e["SGLANG_X"] == "on" and e["PATCHBENCH_ENV_KEY"] == env.key
    assert "PYTHONPATH" not in e
    # sglang's own JIT kernels and CuTe DSL compiles (both outside SGLANG_CACHE_DIR by default) too
    assert e["SGLANG_JIT_CACHE_DIR"] == str(env.path / "jit" / "sglang-jit")
    assert e["CUTE_DSL_CACHE_DIR"] == str(env.path / "jit" / "cute-dsl")


def test_failed_build_names_step_and_log_and_publishes_nothing(upstream, pb_home):
    upstream.write("pyproject.toml", "[project]\nname = 'minipkg'\nversion = '0.1.0'\n")  # two top dirs
    upstream.commit()
    with pytest.raises(PatchbenchError) as info:
        ensure_env([upstream.tree()], BuildSpec(), pb_home, recipe="broken", console=quiet())
    err = info.value
    assert err.step == "build-mini" and err.recipe == "broken"
    assert "uv build failed" in err.message and "last lines of the log" in err.message
    assert "Multiple top-level packages" in err.message
    log = Path(err.log)
    assert log.is_file() and log.parent.parent.name.startswith(".failed-")
    assert str(log) in str(err)
    assert list_envs(pb_home) == [] and not list((pb_home / "envs").glob(".tmp-*"))


_CHILD = """
import json, sys
from pathlib import Path
from toolkit.envs import BuildSpec, ensure_env
from toolkit.tree.applied import AppliedTree
d = json.loads(sys.argv[1])
tree = AppliedTree(**{**d["tree"], "path": Path(d["tree"]["path"])})
env = ensure_env([tree], BuildSpec.from_dict(d["spec"]), Path(d["home"]), recipe=d["recipe"])
print(json.dumps({"key": env.key, "reused": env.reused}))
"""


def _child_argv(tree: AppliedTree, spec: BuildSpec, home: Path, recipe: str) -> list[str]:
    d = {"tree": {k: v for k, v in tree.to_dict().items() if k not in ("patch_commits", "patches")},
         "spec": spec.to_dict(), "home": str(home), "recipe": recipe}
    return [sys.executable, "-c", _CHILD, json.dumps(d)]


@pytest.mark.skipif(not HAVE_NVCC, reason="needs nvcc (a slower build to kill)")
def test_kill_9_during_build_publishes_nothing_and_rebuild_is_clean(upstream, pb_home):
    tree = upstream.tree()
    spec = BuildSpec(arch=("12.0a",), cuda=(("mini", ("csrc/*.cu",)),))
    key = env_key([tree], spec, envs.probe_toolchain(spec))
    envs_dir = pb_home / "envs"
    proc = subprocess.Popen(_child_argv(tree, spec, pb_home, "killed"), cwd=REPO,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not list(envs_dir.glob(f".tmp-{key[:16]}-*")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the build never started"
        time.sleep(0.02)
    time.sleep(random.uniform(0.0, 0.5))  # anywhere in venv / wheel / install / nvcc (the build takes seconds)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL

    leftovers = list(envs_dir.glob(".tmp-*"))
    assert [p.name for p in leftovers] == [f".tmp-{key[:16]}-{proc.pid}"]
    assert not (envs_dir / key[:16]).exists()
    assert find_env(pb_home, key) is None and list_envs(pb_home) == []

    c = quiet()
    env = ensure_env([tree], spec, pb_home, recipe="after", console=c)
    assert not env.reused and env.key == key
    assert "removing interrupted build" in text_of(c)
    assert not list(envs_dir.glob(".tmp-*"))
    assert run_py(env, "import minipkg; print(minipkg.VALUE)") == "1"
    assert sorted(p.name for p in (env.path / "kernels" / "mini" / "csrc").iterdir()) == ["a.o", "b.o"]


def test_concurrent_builds_of_one_key_build_once(upstream, pb_home):
    tree = upstream.tree()
    spec = BuildSpec()
    procs = [subprocess.Popen(_child_argv(tree, spec, pb_home, f"r{i}"), cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(2)]
    results = []
    for p in procs:
        out, errout = p.communicate(timeout=180)
        assert p.returncode == 0, errout
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert results[0]["key"] == results[1]["key"]
    assert sorted(r["reused"] for r in results) == [False, True]
    (info,) = list_envs(pb_home)
    assert sorted(info.recipes) == ["r0", "r1"]


def test_gc_removes_stale_builds_and_unprotected_envs(upstream, pb_home, capsys):
    env_a = ensure_env([upstream.tree()], BuildSpec(env=(("V", "a"),)), pb_home, recipe="keep-me",
                       console=quiet())
    env_b = ensure_env([upstream.tree()], BuildSpec(env=(("V", "b"),)), pb_home, recipe="other",
                       console=quiet())
    stale = pb_home / "envs" / f".tmp-{'f' * 16}-999999"
    (stale / "bin").mkdir(parents=True)
    failed = pb_home / "envs" / f".failed-{'e' * 16}-1" / "logs"
    failed.mkdir(parents=True)

    from toolkit.commands import env as env_cmd

    assert env_cmd.run(Namespace(home=str(pb_home), env_command="list", json=False)) == 0
    out = capsys.readouterr().out
    assert env_a.name in out and env_b.name in out and "keep-me" in out

    dry = gc_envs(pb_home, keep_recipes=["keep-me"], dry_run=True)
    assert dry.removed == [env_b.name] and env_b.path.exists() and stale.exists()
    assert dry.freed_bytes > 0  # what it would free, said by the dry run
    # a --keep-recipes typo would protect nothing; a negative age means nothing: refused
    for bad, words in ((["--keep-recipes", "keep-mee"], "did you mean `keep-me`"),
                       (["--older-than", "-1"], "0 or more")):
        assert main(["env", "gc", "--dry-run", "--home", str(pb_home), *bad]) == 2
        assert words in capsys.readouterr().err
    assert env_b.path.exists()

    res = gc_envs(pb_home, keep_recipes=["keep-me"])
    assert res.removed == [env_b.name] and res.kept == [env_a.name]
    assert sorted(res.stale) == sorted([stale.name, failed.parent.name])
    assert not env_b.path.exists() and not stale.exists() and env_a.path.exists()
    assert not list((pb_home / "envs").glob(".trash-*"))

    # by age: not used for 3 days (pretend it is later)
    assert gc_envs(pb_home, older_than_days=3).removed == []
    later = datetime.now(timezone.utc) + timedelta(days=4)
    assert gc_envs(pb_home, older_than_days=3, keep_recipes=["keep-me"], now=later).removed == []
    assert gc_envs(pb_home, older_than_days=3, now=later).removed == [env_a.name]
    assert list_envs(pb_home) == []


def test_gc_leaves_a_running_build_alone(pb_home):
    live = pb_home / "envs" / f".tmp-{'a' * 16}-1"
    live.mkdir(parents=True)
    lock = envs.key_lock(pb_home, "a" * 64)
    with lock:
        assert gc_envs(pb_home).stale == [] and live.exists()
    assert gc_envs(pb_home).stale == [live.name] and not live.exists()


# --------------------------------------------------------------------------------------------
# overlay mode
# --------------------------------------------------------------------------------------------


def test_overlay_sees_base_torch_without_reinstalling_it(upstream, pb_home):
    base = base_torch_python()
    spec = BuildSpec(mode="overlay", base_python=str(base))
    env = ensure_env([upstream.tree()], spec, pb_home, recipe="overlay", console=quiet())
    out = run_py(env, "import torch, minipkg; print(torch.__version__); print(torch.__file__); "
                      "print(minipkg.__file__)").splitlines()
    assert out[0] == "2.13.0+cpu"
    assert out[1].startswith(str(base.parent.parent)) and out[2].startswith(str(env.path))
    assert not any(p.lower().startswith("torch") for p in env.manifest["packages"])
    assert not list(env.path.glob("lib/python*/site-packages/torch"))
    m = env.manifest
    assert m["mode"] == "overlay" and m["base"]["torch"]["version"] == "2.13.0+cpu"
    assert any(p.startswith("torch==2.13.0") for p in m["base"]["packages"])
    assert m["inputs"]["toolchain"]["base"]["torch"] == {"version": "2.13.0+cpu", "cuda": None}
    assert ensure_env([upstream.tree()], spec, pb_home, console=quiet()).reused


def _fake_dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("")


def test_a_base_interpreter_is_probed_once_until_its_packages_change(upstream, tmp_path, pb_home, monkeypatch):
    """ensure_env probes the interpreter an env is built on; within one process (a sweep, bisect or
    attribute asks once per env) the probe is run again only when what it read changed: an env
    reused on an unchanged base starts no Python, a package installed into the base since is seen
    (a new env key, built), not a stale package set."""
    from toolkit.envs.steps import probe

    base = tmp_path / "base"
    subprocess.run([envs.uv_bin(), "venv", "-q", "--no-config", "--python", sys.executable, str(base)], check=True)
    (site,) = base.glob("lib/python*/site-packages")
    probes = []
    real_run = subprocess.run

    def counting_run(argv, *a, **k):
        if str(probe.PROBE) in map(str, argv):
            probes.append(argv[0])
        return real_run(argv, *a, **k)

    monkeypatch.setattr(probe.subprocess, "run", counting_run)
    spec = BuildSpec(mode="overlay", base_python=str(base / "bin" / "python"))
    first = ensure_env([upstream.tree()], spec, pb_home, console=quiet())
    again = ensure_env([upstream.tree()], spec, pb_home, console=quiet())
    assert again.reused and again.key == first.key
    assert probes == [str(base / "bin" / "python")]
    _fake_dist(site, "extra-pkg", "1.0")  # installed into the base meanwhile
    changed = ensure_env([upstream.tree()], spec, pb_home, console=quiet())
    assert len(probes) == 2 and not changed.reused and changed.key != first.key
    assert "extra-pkg==1.0" in changed.manifest["base"]["packages"]


def test_flashinfer_jit_cache_in_base_is_refused(tmp_path, pb_home):
    base = tmp_path / "base"
    subprocess.run([envs.uv_bin(), "venv", "-q", "--no-config", "--python", sys.executable,
                    str(base)], check=True)
    (site,) = base.glob("lib/python*/site-packages")
    _fake_dist(site, "flashinfer-jit-cache", "0.7.2+cu130")
    fi = Upstream(tmp_path / "flashinfer", dist="flashinfer-python", package="flashinfer")
    spec = BuildSpec(mode="overlay", base_python=str(base / "bin" / "python"), arch=("12.0a",))
    with pytest.raises(BadInput) as info:
        ensure_env([fi.tree("flashinfer")], spec, pb_home, recipe="fi", console=quiet())
    err = info.value
    assert err.step == "flashinfer-check"
    assert "flashinfer-jit-cache 0.7.2+cu130" in err.message and "base_python" in err.message
    assert "silently ignored" in err.message and "uninstall flashinfer-jit-cache" in str(err)
    assert list_envs(pb_home) == []

    # without it the same recipe builds (FlashInfer patched, no AOT package anywhere)
    (jit_cache,) = site.glob("flashinfer_jit_cache-*.dist-info")
    import shutil

    shutil.rmtree(jit_cache)
    _fake_dist(site, "flashinfer-cubin", "0.7.2")  # noted, not refused
    c = quiet()
    env = ensure_env([fi.tree("flashinfer")], spec, pb_home, console=c)
    assert not env.reused and "flashinfer-cubin 0.7.2 is installed" in text_of(c)


def test_ctrl_c_in_a_build_step_says_the_recipe_the_step_and_the_log_kept(tmp_path):
    """Still a KeyboardInterrupt (nothing that goes on after a failed recipe catches it), with where
    it stopped; the env builder moves the log to the kept .failed-* directory and says that path."""
    from toolkit.envs.lifecycle import _salvage_failure
    from toolkit.envs.steps.steps import Steps
    from toolkit.errors import Interrupted

    tmp = tmp_path / "envs" / ".tmp-abc-1"
    steps = Steps(tmp, None, recipe="mine/heavy")
    with pytest.raises(KeyboardInterrupt) as exc:
        with steps.step("nvcc sglang", "nvcc"):
            steps.note("nvcc sglang", "nvcc -gencode arch=compute_120a,code=sm_120a ...")
            raise KeyboardInterrupt
    assert isinstance(exc.value, Interrupted)
    _salvage_failure(tmp, tmp_path / "envs", "abc" * 6, exc.value)
    kept = Path(exc.value.log)
    assert kept.is_file() and ".failed-" in str(kept) and not tmp.exists()
    assert str(exc.value).startswith("interrupted at recipe mine/heavy: step nvcc sglang [log kept: ")
