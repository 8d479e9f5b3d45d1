"""Sweeps through a real one-node Slurm cluster (tests/slurm_cluster.py): the demo recipes on the
miniature upstream, on CPU. The local run and the Slurm job share the node home, so the job reuses
the envs the local run built (what a second job on the same node does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from slurm_cluster import SlurmCluster, unavailable
from test_analysis_e2e import mini  # noqa: F401  (fixture: a git copy of the miniature upstream)
from test_history import _env, four_releases, kill_track_in_second_pass, patched_recipes, tracked_ok_runs  # noqa: F401  (four_releases: a fixture)
from toolkit.results.store import Store

# One Slurm cluster (a session fixture) for all of them: on one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("slurm")

DEMO = ["demo/baseline", "demo/fast", "demo/slow"]
PROVENANCE = ("recipe", "repeat", "env_key", "bench_key", "gpu_key", "sglang_version", "flashinfer_version")
MACHINE = ("host", "gpus", "gpu_key", "driver", "cuda", "topology", "cpu")


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    why = unavailable()
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        env = cluster.start()
    except RuntimeError as exc:
        cluster.stop()
        pytest.skip(f"the one-node Slurm cluster does not start here: {exc}")
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield cluster
    cluster.stop()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def shared_home(tmp_path_factory):
    """The submitting side's PATCHBENCH_HOME, also the node's (one machine): envs built once."""
    return tmp_path_factory.mktemp("pbhome")


def patchbench(home: Path, *argv: str, timeout: float = 600, env_extra: dict | None = None,
               **popen) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATCHBENCH_HOME": str(home), "PATCHBENCH_STORE": "", **(env_extra or {})}
    env.pop("PATCHBENCH_STORE")
    return subprocess.run([sys.executable, "-m", "toolkit", *argv], capture_output=True, text=True, env=env,
                          timeout=timeout, **popen)


def slurm_args(home: Path) -> list[str]:
    return ["--executor", "slurm", "--node-home", str(home)]


@pytest.mark.slow  # the Slurm tests run one after another on one worker: this one keeps `nox -s tests` short
def test_demo_sweep_through_slurm_equals_local_run(slurm, shared_home):
    local = shared_home / "local.sqlite"
    out = patchbench(shared_home, "run", *DEMO, "--repeats", "1", "--store", str(local))
    assert out.returncode == 0, out.stderr[-2000:]
    merged = shared_home / "slurm.sqlite"
    out = patchbench(shared_home, "run", *DEMO, "--repeats", "1", "--store", str(merged), *slurm_args(shared_home))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "COMPLETED" in out.stderr and "imported: 3 run(s)" in out.stderr

    a, b = Store(local).runs(status="ok"), Store(merged).runs(status="ok")
    assert len(a) == len(b) == 3
    job_ids = {r.extra["slurm"]["job_id"] for r in b}
    assert len(job_ids) == 1, "one comparison is one job on one node"
    job = job_ids.pop()
    for r in b:
        assert Path(r.log_paths["slurm_job"]).is_file()
        assert r.extra["slurm"]["job_id"] == job
    assert "reused (same key" in Path(b[0].log_paths["slurm_job"]).with_suffix(".err").read_text()

    def prov(runs):
        return sorted(json.dumps([[getattr(r, k) for k in PROVENANCE], r.tree_hashes,
                                  [r.machine.get(k) for k in MACHINE]], sort_keys=True) for r in runs)

    assert prov(a) == prov(b)
    assert {len(Store(merged).samples(r.run_id)) for r in b} == {len(Store(local).samples(r.run_id)) for r in a}

    # importing again (results --jobs) adds nothing: each job's runs land exactly once
    out = patchbench(shared_home, "results", "--jobs", "--store", str(merged))
    assert out.returncode == 0 and job in out.stdout and "COMPLETED" in out.stdout
    assert len(Store(merged).runs()) == 3


def _servers(home: Path) -> list[psutil.Process]:
    """Servers started from an env under `home` (other people's servers may run on this machine)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "sglang.launch_server" in cmd and cmd[0].startswith(str(home)):
            found.append(p)
    return found


@pytest.mark.slow  # the Slurm tests run one after another on one worker: this one keeps `nox -s tests` short
def test_scancel_leaves_interrupted_run_and_no_orphan_server_then_rerun_completes(slurm, shared_home):
    store = shared_home / "cancel.sqlite"
    jobs_dir = shared_home / "slurm" / "jobs"
    before = {p.name for p in jobs_dir.glob("*.json")} if jobs_dir.is_dir() else set()
    env = {**os.environ, "PATCHBENCH_HOME": str(shared_home)}
    argv = [sys.executable, "-m", "toolkit", "run", "demo/baseline", "--repeats", "6", "--store", str(store),
            *slurm_args(shared_home)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        job = None
        while time.monotonic() < deadline and proc.poll() is None:
            new = {p.name for p in jobs_dir.glob("*.json")} - before if jobs_dir.is_dir() else set()
            if new:
                job = json.loads((jobs_dir / new.pop()).read_text())
                export = Path(job["folder"]) / "runs.json"
                runs = json.loads(export.read_text())["runs"] if export.is_file() else []
                if any(r["status"] == "ok" for r in runs) and any(r["status"] == "running" for r in runs):
                    break
            time.sleep(0.1)
        assert job, "no job submitted"
        subprocess.run(["scancel", job["job_id"]], check=True, timeout=30)
        out, errs = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, errs[-2000:]
    assert "CANCELLED" in errs
    runs = Store(store).runs()
    interrupted = [r for r in runs if r.status == "interrupted"]
    assert len(interrupted) == 1 and [r for r in runs if r.status == "ok"]
    bad = interrupted[0]
    assert bad.extra["slurm"]["job_id"] == job["job_id"] and bad.extra["slurm"]["final_state"].startswith("CANCELLED")
    assert job["log"] in bad.error and Path(job["log"]).is_file()
    assert not _servers(shared_home), "a server outlived its cancelled job"

    out = patchbench(shared_home, "run", "demo/baseline", "--repeats", "2", "--store", str(store),
                     *slurm_args(shared_home))
    assert out.returncode == 0, out.stderr[-2000:]
    runs = Store(store).runs()
    assert sum(r.status == "ok" for r in runs) >= 3 and sum(r.status == "interrupted" for r in runs) == 1
    assert not _servers(shared_home)


@pytest.mark.slow  # the Slurm tests run one after another on one worker: this one keeps `nox -s tests` short
def test_bisect_through_slurm_names_the_same_patch(slurm, mini, home):  # noqa: F811 (the fixture)
    from test_analysis_e2e import _cost_patch, _new_file_patch, _recipe

    (home / "config.toml").write_text(f'[cluster]\npoll_s = 0.5\nnode_home = "{home}"\n')  # the user config
    stack = []
    for i in (1, 2, 3):
        (mini / "patches" / f"p{i}.patch").write_text(
            _cost_patch(mini, "STEP_BASE_S = 0.012", "STEP_BASE_S = 0.020", "planted: slower step")
            if i == 2 else _new_file_patch(i))
        stack.append(f"p{i}.patch")
    recipe = _recipe(mini, "stack3", stack)
    argv = ["bisect", recipe, "--metric", "output_tok_s@1", "--threshold", "10", "--json"]
    found = {}
    for executor in ("local", "slurm"):
        store = home / f"{executor}.sqlite"
        proc = subprocess.run([sys.executable, "-m", "toolkit", *argv, "--executor", executor, "--store", str(store)],
                              capture_output=True, text=True, timeout=600, env={**os.environ, "PATCHBENCH_HOME": str(home)})
        assert proc.returncode == 0, proc.stderr[-2000:]
        found[executor] = json.loads(proc.stdout)
    assert found["local"]["culprit_label"] == found["slurm"]["culprit_label"] == "p2.patch"
    runs = Store(home / "slurm.sqlite").runs(status="ok")
    assert runs and all(r.extra["slurm"]["job_id"] for r in runs)
    assert len({r.extra["slurm"]["job_id"] for r in runs}) >= 2, "each probe is a job of its own"


def test_attribute_through_slurm_sends_every_variant_at_once(slurm, mini, home):  # noqa: F811
    from test_analysis_e2e import _cost_patch, _recipe

    (home / "config.toml").write_text(f'[cluster]\npoll_s = 0.5\nnode_home = "{home}"\n')
    (mini / "patches" / "fast.patch").write_text(
        _cost_patch(mini, "STEP_BASE_S = 0.012", "STEP_BASE_S = 0.006", "faster step"))
    recipe = _recipe(mini, "one", ["fast.patch"])
    proc = subprocess.run([sys.executable, "-m", "toolkit", "attribute", recipe, "--metric", "output_tok_s@1",
                           "--repeats", "3", "--json", "--executor", "slurm"], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PATCHBENCH_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    base, after = (sum(v) / len(v) for v in out["prefix_values"])
    assert after > base * 1.2, out
    lines = [ln for ln in proc.stderr.splitlines() if "submitted attribute" in ln or "RUNNING" in ln]
    assert "submitted" in lines[0] and "submitted" in lines[1], "both variants go to the queue before either runs"
    assert len(Store(home / "results.sqlite").runs(status="ok")) == 6


def test_job_cancelled_while_queued_leaves_one_interrupted_record_per_recipe(slurm, shared_home):
    store = shared_home / "queued.sqlite"
    jobs_dir = shared_home / "slurm" / "jobs"
    before = {p.name for p in jobs_dir.glob("*.json")} if jobs_dir.is_dir() else set()
    env = {**os.environ, "PATCHBENCH_HOME": str(shared_home)}
    argv = [sys.executable, "-m", "toolkit", "run", "demo/baseline", "demo/fast", "--store", str(store),
            *slurm_args(shared_home), "--slurm-arg", "begin=now+1hour"]  # any sbatch option passes through
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not ({p.name for p in jobs_dir.glob("*.json")} - before):
            time.sleep(0.1)
        job = json.loads((jobs_dir / ({p.name for p in jobs_dir.glob("*.json")} - before).pop()).read_text())
        state = subprocess.run(["squeue", "-h", "-j", job["job_id"], "-o", "%T"], capture_output=True, text=True)
        assert state.stdout.strip() == "PENDING"
        subprocess.run(["scancel", job["job_id"]], check=True, timeout=30)
        _, errs = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "CANCELLED" in errs
    runs = Store(store).runs()
    assert sorted(r.recipe for r in runs) == ["demo/baseline", "demo/fast"]
    assert all(r.status == "interrupted" and job["log"] in r.error and "before any run" in r.error for r in runs)
    out = patchbench(shared_home, "results", "--jobs", "--store", str(store))
    assert job["job_id"] in out.stdout and "CANCELLED" in out.stdout


def test_strict_check_reaches_the_slurm_job(slurm, home, tmp_path):
    """`run --strict-check --executor slurm`: the node refuses an unresolved static check as the
    local run does (exit 2, the reason from the job), instead of measuring an unchecked config."""
    from test_static_unresolved import RECIPE, _project

    root = _project(tmp_path)
    path = root / "recipes" / "u.toml"
    path.write_text(RECIPE)
    out = patchbench(home, "run", str(path), "--until", "check", "--strict-check", *slurm_args(home))
    assert out.returncode == 2, out.stderr[-2000:]
    assert "static check unresolved: RuntimeError" in out.stderr, out.stderr[-2000:]


@pytest.mark.slow  # the Slurm tests run one after another on one worker: this one keeps `nox -s tests` short
def test_track_through_slurm_equals_local_track_and_resumes_by_identity(slurm, home, monkeypatch, tmp_path,
                                                                        four_releases):  # noqa: F811
    """`track --executor slurm`: each pending point one job (all submitted at once), the runs and the
    does-not-apply records imported with their job, the same points and outcomes as a local track,
    a second track submits nothing (the points are done by identity), and a point whose job died is
    a failure that the next track measures."""
    from toolkit.results import jobs

    _env(monkeypatch, four_releases)
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(patched_recipes(tmp_path, four_releases)))
    (home / "config.toml").write_text(f'[cluster]\npoll_s = 0.5\nnode_home = "{home}"\n')
    argv = ["track", "patched", "--source", "sglang", "--releases", "--since", "0.1.1", "--json"]
    stores = {ex: str(home / f"{ex}.sqlite") for ex in ("local", "slurm")}
    out = {}
    for ex in ("local", "slurm"):
        proc = patchbench(home, *argv, "--executor", ex, "--store", stores[ex])
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[ex] = json.loads(proc.stdout)
    lines = [ln for ln in proc.stderr.splitlines() if "submitted track" in ln or "RUNNING" in ln]
    assert all("submitted" in ln for ln in lines[:3]), "every pending point goes to the queue at once"
    for ex in out:
        assert out[ex]["measured"] == ["0.1.1"] and out[ex]["already_measured"] == []
        assert {k: v["outcome"] for k, v in out[ex]["not_measured"].items()} == {
            "0.1.2": "does-not-apply", "0.1.3": "does-not-apply"}

    recs = [r for r in jobs.load_all(home) if r.command == "track"]
    assert len(recs) == 3 and all(r.state == "COMPLETED" and r.imported for r in recs), recs
    assert sorted(n for r in recs for n in r.recipes) == [f"patched@{v}" for v in ("0.1.1", "0.1.2", "0.1.3")]
    runs = Store(stores["slurm"]).tracked_runs("patched")
    assert len(runs) == 3 and {r.extra["slurm"]["job_id"] for r in runs} == {r.job_id for r in recs}
    [ok] = [r for r in runs if r.status == "ok"]
    assert out["slurm"]["run_ids"] == [ok.run_id] and Path(ok.log_paths["slurm_job"]).is_file()
    [local_ok] = [r for r in Store(stores["local"]).tracked_runs("patched") if r.status == "ok"]
    assert ok.identity == local_ok.identity and ok.env_key == local_ok.env_key
    assert Store(stores["slurm"]).samples([ok.run_id])

    def series(store: str) -> list:
        proc = patchbench(home, "history", "patched", "--metric", "output_tok_s@1", "--json", "--store", store)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return [(e["label"], e["status"], e["n_runs"]) for e in json.loads(proc.stdout)["series"]]

    assert series(stores["slurm"]) == series(stores["local"]) == [
        ("0.1.1", "measured", 1), ("0.1.2", "does-not-apply", 0), ("0.1.3", "does-not-apply", 0)]

    again = patchbench(home, *argv, "--executor", "slurm", "--store", stores["slurm"])
    assert again.returncode == 0, again.stderr[-2000:]
    res = json.loads(again.stdout)
    assert res["measured"] == [] and sorted(res["already_measured"]) == ["0.1.1", "0.1.2", "0.1.3"]
    assert "submitted" not in again.stderr and len([r for r in jobs.load_all(home) if r.command == "track"]) == 3

    # a point whose job dies (cancelled while queued) is a failure now and measured again next time
    jobs_before = {r.job_id for r in jobs.load_all(home)}
    env = {**os.environ, "PATCHBENCH_HOME": str(home)}
    argv0 = [sys.executable, "-m", "toolkit", *argv[:-3], "--since", "0.1.0", "--json", "--executor", "slurm",
             "--store", stores["slurm"]]
    proc = subprocess.Popen([*argv0, "--slurm-arg", "begin=now+1hour"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not ({r.job_id for r in jobs.load_all(home)} - jobs_before):
            time.sleep(0.1)
        [queued] = {r.job_id for r in jobs.load_all(home)} - jobs_before
        subprocess.run(["scancel", queued], check=True, timeout=30)
        stdout, errs = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, errs[-2000:]
    res = json.loads(stdout)
    assert res["measured"] == [] and "CANCELLED" in res["failed"]["0.1.0"] and len(res["already_measured"]) == 3
    rerun = subprocess.run(argv0, capture_output=True, text=True, env=env, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert json.loads(rerun.stdout)["measured"] == ["0.1.0"]
    assert [e[:2] for e in series(stores["slurm"])][0] == ("0.1.0", "measured")


@pytest.mark.slow  # the Slurm tests run one after another on one worker: this one keeps `nox -s tests` short
def test_with_a_postgresql_store_the_node_writes_its_runs_directly(slurm, shared_home, pg_url, tmp_path):
    """No per-job SQLite and no import: the job's runs are in the team's database, stamped with the job;
    with `[store] artifacts` (the node home's user config) each run's files are in the shared folder,
    their sha256 in the database, and `results --check-artifacts` finds them as stored."""
    kept = tmp_path / "team-artifacts"
    config = shared_home / "config.toml"
    assert not config.exists()
    config.write_text(f'[store]\nartifacts = "{kept}"\n')
    try:
        out = patchbench(shared_home, "run", "demo/baseline", "demo/fast", "--repeats", "1", "--store", pg_url,
                         *slurm_args(shared_home))
        checked = patchbench(shared_home, "results", "--check-artifacts", "--store", pg_url)
    finally:
        config.unlink()
    assert out.returncode == 0, out.stderr[-2000:]
    runs = Store(pg_url).runs(status="ok")
    assert sorted(r.recipe for r in runs) == ["demo/baseline", "demo/fast"]
    (job,) = {r.extra["slurm"]["job_id"] for r in runs}
    assert not (shared_home / "node-jobs" / job / "results.sqlite").exists()
    log = Path(runs[0].log_paths["slurm_job"]).with_suffix(".err").read_text()
    assert f"results into {Store(pg_url).path}" in log
    assert "COMPLETED" in out.stderr and "stored by the job: 2 run(s)" in out.stderr

    from toolkit.results.artifacts import sha256_of

    files = Store(pg_url).artifacts([r.run_id for r in runs])
    assert {a.run_id for a in files} == {r.run_id for r in runs}
    assert {"quality.json"} <= {a.name for a in files if a.run_id == runs[0].run_id}
    for a in files:
        assert Path(a.path).parent.is_relative_to(kept / a.run_id) and sha256_of(Path(a.path)) == a.sha256
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(files)} kept file(s) of 2 run(s): all as stored" in " ".join(checked.stdout.split())
    # looking at the jobs again adds nothing
    assert patchbench(shared_home, "results", "--jobs", "--store", pg_url).returncode == 0
    assert len(Store(pg_url).runs()) == 2


def test_a_sweep_through_slurm_launches_the_defaults_server_once(slurm, shared_home, tmp_path):
    """`sweep --executor slurm`: each job holds the default configuration; a variant whose launch is the
    default's server (the miniature resolves an absent --attention-backend to flashinfer) is launched
    once in its job, not benchmarked, and the sweep reports it as the default's server."""
    from conftest import REPO_ROOT
    from test_same_server import SAME

    recipe = tmp_path / "same.toml"
    recipe.write_text(SAME.replace('"../../upstream/minisglang"', json.dumps(str(REPO_ROOT / "upstream" / "minisglang")))
                      .replace("benchmark.input_len = [8, 12]", ""))
    store = shared_home / "same.sqlite"
    out = patchbench(shared_home, "sweep", str(recipe), "--fixed", "--repeats", "1", "--json", "-o", str(tmp_path / "o"),
                     "--store", str(store), *slurm_args(shared_home))
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    (fi,) = [v for v in doc["variants"] if v["variant"].endswith("[attention-backend=flashinfer]")]
    assert fi["same_server_as"] == doc["variants"][0]["variant"] and not fi["failed"], fi
    runs = [r for r in Store(store).runs() if r.recipe == fi["variant"]]
    assert len(runs) == 1 and runs[0].extra["same_server_as"] and not Store(store).samples([runs[0].run_id])


def test_a_point_a_killed_track_left_short_gets_only_the_runs_it_lacks_through_slurm(slurm, home, monkeypatch,
                                                                                     four_releases):  # noqa: F811
    """`track --repeats 2` killed between its passes leaves a point with one run of the two asked; the next
    track through Slurm gives that point the one run it lacks (was: its job launched 2 more, 3 in all, and
    the series mixed 2- and 3-run points), and the point is done."""
    _env(monkeypatch, four_releases)
    (home / "config.toml").write_text(f'[cluster]\npoll_s = 0.5\nnode_home = "{home}"\n')
    argv = ["track", "demo/update", "--source", "sglang", "--releases", "--limit", "2", "--repeats", "2"]
    before = kill_track_in_second_pass(home, argv, launched=3)  # one point has both runs, the other one
    short = sorted(p for p, n in before.items() if n < 2)
    assert short and len(before) == 2, before
    out = patchbench(home, *argv, "--json", "--executor", "slurm")
    assert out.returncode == 0, out.stderr[-2000:]
    after = tracked_ok_runs(home)
    assert all(after[p] == 2 for p in before), (before, after)  # the one run each short point lacked
    again = patchbench(home, *argv, "--json", "--executor", "slurm")
    assert again.returncode == 0 and set(before) <= set(json.loads(again.stdout)["already_measured"])


@pytest.mark.slow  # the Slurm tests run one after another on one worker: this one keeps `nox -s tests` short
def test_a_slurm_bisect_reads_only_its_own_campaign_and_never_a_run_twice(slurm, home, pg_url, tmp_path):
    """With a PostgreSQL store each probe's job sees every stored run: its fresh meter (no campaign key, no
    record of what the bisect had read) took a `run` of the base stored before the box slowed 15% as the
    probe's values, and each top-up job handed out the same stored runs again (one launch read twice), with
    no run ids sent back. Now a job reads only this bisect's sweep and never a run the bisect already
    holds: every value is one run of its own, launched in the bisect's sweep; the stored base is named
    as left out, as a local bisect names it."""
    root, here = _harmless_bisect_project(tmp_path, home)
    first = patchbench(home, "run", "t/base", "--repeats", "2", "--store", pg_url, "--json", cwd=root, env_extra=here)
    assert first.returncode == 0, first.stderr[-2000:]
    stored = [rid for _, rid in json.loads(first.stdout)["runs"]]
    out = patchbench(home, "bisect", "t/stack", "--metric", "output_tok_s@1", "--threshold", "30", "--max-repeats",
                     "3", "--store", pg_url, "--json", "--executor", "slurm", cwd=root,
                     env_extra={**here, "SGLANG_MINI_BOX_SLOWDOWN": "1.15"})
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout)
    ids = [rid for p in res["probes"] for rid in p["run_ids"]]
    assert all(len(p["run_ids"]) == len(p["values"]) >= 2 for p in res["probes"]), res["probes"]
    assert len(ids) == len(set(ids)) and not set(ids) & set(stored), res["probes"]  # each value one run, launched here
    runs = Store(pg_url).runs(run_ids=ids)
    assert len(runs) == len(ids) and len({r.group_id for r in runs}) == 1, [r.group_id for r in runs]
    base = next(p for p in res["probes"] if p["label"] == "prefix0")
    assert base["reused"] == stored and res["left_out"]["prefix0"].startswith("prefix0: 2 stored run(s) from another")


@pytest.mark.slow  # the Slurm tests run one after another on one worker: this one keeps `nox -s tests` short
def test_a_finished_slurm_bisect_asked_again_says_it_measures_again_in_a_new_sweep(slurm, home, tmp_path):
    """A local bisect asked again replays its finished sweep; through Slurm each job measures anew, so the
    same bisect asked again launched every probe again in a new sweep and said nothing of the first one
    (README: "Slurm probes follow the same rule"). Now the text and the JSON name the sweep it did not
    replay and the new one it measured in."""
    root, here = _harmless_bisect_project(tmp_path, home)
    argv = ["bisect", "t/stack", "--metric", "output_tok_s@1", "--threshold", "30", "--max-repeats", "3",
            "--executor", "slurm"]
    first = patchbench(home, *argv, "--json", cwd=root, env_extra=here)
    assert first.returncode == 0, first.stderr[-3000:]
    one = json.loads(first.stdout)
    assert one["not_continued"] is None and one["runs"] >= 4, one
    again = patchbench(home, *argv, "--json", cwd=root, env_extra=here)
    assert again.returncode == 0, again.stderr[-3000:]
    two = json.loads(again.stdout)
    assert two["sweep"] != one["sweep"] and two["replayed"] is None and two["runs"] >= 4, two
    assert two["not_continued"]["sweep"] == one["sweep"] and two["not_continued"]["finished"], two
    said = f"note: sweep {one['sweep']} of this search, finished "
    assert said in again.stderr and f"measures again in a new sweep {two['sweep']}" in again.stderr
    text = patchbench(home, *argv, cwd=root, env_extra=here)  # the text says it where the result is printed
    assert text.returncode == 0 and "note: sweep " in text.stdout and "not replayed through Slurm" in text.stdout


def _harmless_bisect_project(tmp_path, home):
    """A project of the demo recipes with a stack of one harmless patch (t/stack) and a cluster config
    polling fast; (its root, the env that gives the jobs this checkout's toolkit)."""
    import shutil

    from test_bisect_campaigns import _harmless_stack

    root = tmp_path / "proj"
    root.mkdir()
    for part in ("recipes/demo", "patches/demo", "upstream/minisglang"):
        shutil.copytree(Path(__file__).resolve().parents[1] / part, root / part,
                        ignore=shutil.ignore_patterns("*.lock.json", "__pycache__"))
    _harmless_stack(root, 1)
    (home / "config.toml").write_text(f'[cluster]\npoll_s = 0.5\nnode_home = "{home}"\n')
    return root, {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}  # this checkout's toolkit, here and in the jobs
