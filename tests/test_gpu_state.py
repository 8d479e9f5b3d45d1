"""GPU state during runs (toolkit.run.gpustate) with a test double of pynvml fed recorded series:
throttle detection, foreign processes, clocks apart from compared runs, "no GPU state" without
NVML, and the doctor's rules over fixture facts."""

from __future__ import annotations

import json
import os
import sys
import time
from types import SimpleNamespace

import pytest

from nvml_double import FakeNvml, gpu
from toolkit.results import box_flags as flags
from toolkit.run.gpustate import doctor
from toolkit.run.gpustate.facts import cuda_of_packages, gather
from toolkit.run.gpustate.nvml import decode_reasons
from toolkit.run.gpustate.sampler import Sampler
from toolkit.run.gpustate.summary import summarize

POWER_CAP, HW_THERMAL, IDLE = 0x4, 0x40, 0x1


def sample(fake, seconds: float = 0.15, **kw) -> dict:
    """Sample `fake` for `seconds` at 10 ms (the replay is the recorded series, cycled)."""
    kw = {"environ": {}, "matchable": True, **kw}
    s = Sampler(module=fake, interval_s=0.01, **kw).start()
    time.sleep(seconds)
    return s.stop()


def test_decode_reasons_names_the_bits():
    assert decode_reasons(POWER_CAP | HW_THERMAL | IDLE) == ["idle", "sw_power_cap", "hw_thermal"]
    assert decode_reasons(0) == [] and decode_reasons(None) == []


def test_power_throttling_over_the_share_is_flagged_and_idle_is_not():
    # 10 recorded ticks: 4 at the power cap; GPU 1 idles (not a throttle) and peaks at 84 C.
    fake = FakeNvml({"gpus": [gpu(0, n=10, reasons=[POWER_CAP] * 4 + [0] * 6, power=[600.0] * 4 + [420.0] * 6),
                              gpu(1, n=10, reasons=IDLE, temp=[70, 84])]})
    s = Sampler(module=fake, interval_s=3600, environ={}).start()  # the thread reads tick 0, then waits: the rest by hand
    while len(s.gpus[1]["series"]["sm_mhz"]) < 1:
        time.sleep(0.001)
    for n in range(1, 10):
        s._tick(n)
    record = s.stop()
    summary = summarize(record)
    m = summary["metrics"]
    assert len(record["t"]) == 10 and m["gpu_power_throttled_share"] == 0.4 and m["gpu_thermal_throttled_share"] == 0.0
    assert m["gpu_throttled_share"] == 0.4 and m["gpu_temp_c_max"] == 84 and m["gpu_power_limit_w"] == 600.0
    assert m["gpu_power_w_mean"] == pytest.approx((4 * 600 + 6 * 420 + 10 * 450) / 20, abs=0.1)
    assert set(summary["reasons_seen"]) == {"idle", "sw_power_cap"}
    assert flags.own_flags(summary) == ["power-throttled 40% of the window"]
    # below the share: no flag
    assert flags.own_flags(summary, share=0.5) == []


def test_a_window_shorter_than_a_tick_still_has_one_reading():
    assert len(sample(FakeNvml(), seconds=0.0)["t"]) == 1


def test_thermal_throttling_and_new_ecc_errors():
    fake = FakeNvml({"gpus": [gpu(0, reasons=HW_THERMAL, temp=88, ecc=(2, 5))]})
    summary = summarize(sample(fake))
    assert summary["metrics"]["gpu_thermal_throttled_share"] == 1.0
    assert summary["metrics"]["gpu_ecc_errors_new"] == 3
    assert flags.own_flags(summary) == ["thermal-throttled 100% of the window", "3 new uncorrected ECC errors"]


def test_foreign_processes_exclude_patchbench_and_its_children():
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        fake = FakeNvml({"gpus": [gpu(0), gpu(1)]},
                        processes=[(0, os.getpid(), 500), (1, child.pid, 70_000), (1, 999_999_1, 2_000)])
        summary = summarize(sample(fake))
    finally:
        child.kill()
        child.wait()
    assert summary["metrics"]["gpu_foreign_processes"] == 1
    (p,) = summary["foreign_processes"]
    assert p["pid"] == 999_999_1 and p["gpu"] == 1 and p["used_mib"] == 2_000
    assert flags.own_flags(summary) == [f"1 foreign process on its GPUs (pid {p['pid']} on GPU 1)"]


def test_only_the_visible_gpus_are_sampled():
    fake = FakeNvml({"gpus": [gpu(0, sm=2400), gpu(1, sm=1000), gpu(2, sm=2400)]})
    record = sample(fake, environ={"CUDA_VISIBLE_DEVICES": "0,GPU-00000002"})
    assert [g["index"] for g in record["gpus"]] == [0, 2]
    assert summarize(record)["metrics"]["gpu_sm_clock_mhz_median"] == 2400
    none = Sampler(module=FakeNvml(), environ={"CUDA_VISIBLE_DEVICES": "7"}).start().stop()
    assert none == {"available": False, "reason": "CUDA_VISIBLE_DEVICES=7 matches no NVIDIA GPU"}


def test_no_nvml_means_no_gpu_state_never_zeros(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    record = Sampler(environ={}).start().stop()
    assert record == {"available": False, "reason": "nvidia-ml-py (pynvml) is not installed"}
    summary = summarize(record)
    assert summary["available"] is False and "metrics" not in summary
    run = SimpleNamespace(run_id="r1", recipe="x", gpu_key="none", extra={"gpu_state": summary})
    assert flags.own_flags(summary) == [] and flags.short(run, []) == "no GPU state"
    # no driver: the double refuses nvmlInit as NVML does
    assert "Driver Not Loaded" in summarize(Sampler(module=FakeNvml(fail_init=True)).start().stop())["reason"]
    # a stored run from before GPU state was recorded reads the same
    assert flags.short(SimpleNamespace(extra={}), []) == "no GPU state"


def _run(rid: str, sm: float, gpu_key: str = "1x G", **box) -> SimpleNamespace:
    state = {"available": True, "metrics": {"gpu_sm_clock_mhz_median": sm, "gpu_mem_clock_mhz_median": 14001},
             "box": {"names": ["RTX PRO 6000 Server"], "driver": "580.65", "power_limits_w": [600.0],
                     "persistence": [True], "app_clocks": [{"sm": None, "mem": None}], **box}}
    return SimpleNamespace(run_id=rid, recipe="r", gpu_key=gpu_key, extra={"gpu_state": state})


def test_clocks_more_than_two_percent_apart_from_the_compared_runs_are_flagged():
    runs = [_run("a", 2400), _run("b", 2410), _run("c", 2390), _run("d", 2280), _run("e", 1800, gpu_key="1x H")]
    got = flags.clock_flags(runs)
    assert set(got) == {"d"}, got  # 2280 is -4.8% from the 2395 median; e is alone on its GPU kind
    assert "-4.8%" in got["d"] and "2395 MHz median" in got["d"]
    assert flags.short(runs[3], flags.run_flags(runs)["d"]) == "clock -4.8%"
    assert flags.clock_outlier(2400, [2380]) is None


def test_what_else_differed_on_the_box():
    a = _run("a", 2400)
    b = _run("b", 2200, names=["RTX PRO 6000 Max-Q"], power_limits_w=[300.0], persistence=[False], driver="590.1")
    diffs = flags.differences(flags.state_of(a), flags.state_of(b))
    assert diffs == ["GPU model/edition: RTX PRO 6000 Server -> RTX PRO 6000 Max-Q", "GPU driver: 580.65 -> 590.1",
                     "power limit (W): 600.0 -> 300.0", "persistence mode: True -> False",
                     "median SM clock: 2400 -> 2200 MHz (-8.3%)"]
    assert flags.differences(flags.state_of(a), flags.state_of(_run("c", 2410))) == []
    none = SimpleNamespace(extra={})
    assert flags.differences(flags.state_of(a), flags.state_of(none)) == [
        "GPU state: recorded for one run only (no GPU state for the other)"]


# -- doctor ---------------------------------------------------------------------------------------

def healthy_facts(**over) -> dict:
    g = [gpu(i) for i in range(2)]
    for x in g:
        x["processes"] = []
    facts = {"nvml": {"available": True, "driver": "580.65.06", "cuda_driver": "13.0", "gpus": g,
                      "pairs": [{"a": 0, "b": 1, "p2p": True, "link": "HOSTBRIDGE"}]},
             "cupti": {"admin_only": False, "root": False},
             "recipe": {"name": "r", "gpus": 2, "mem_fraction_static": 0.85},
             "env_cuda": {"run": "abcd1234", "torch": "12.8"},
             "host": {"available": True, "window_s": 1.0, "cpus": 64, "busy_cores": 0.3, "own_cores": 0.1,
                      "foreign_cores": 0.2, "steal_share": 0.0, "foreign_top": []}}
    facts.update(over)
    return facts


def _by_name(checks):
    return {c.name: c for c in checks}


def test_doctor_healthy_box_is_all_ok():
    checks = doctor.run_rules(healthy_facts())
    assert {c.status for c in checks if c.name != "locked clocks"} == {"ok"}, [c for c in checks if c.status != "ok"]
    (locked,) = [c for c in checks if c.name == "locked clocks"]  # NVML has no getter: said, not passed
    assert locked.status == "skip" and "cannot see locked clocks" in locked.message
    assert doctor.exit_code(checks) == 0


def test_doctor_rules_find_what_is_wrong_with_the_fix():
    f = healthy_facts()
    g0, g1 = f["nvml"]["gpus"]
    g0["persistence"] = False
    g1["power_limit_w"] = 450.0
    g1["app_clocks"], g1["default_app_clocks"] = {"sm": 2100, "mem": 14001}, {"sm": 2400, "mem": 14001}
    g0["ecc_uncorrected"] = 4
    g1["processes"] = [{"pid": 4242, "used_mib": 30_000}]
    g1["mem_free_mib"] = 40_000
    g1["pcie"]["max_width"] = 8
    f["nvml"]["pairs"][0]["p2p"] = False
    f["cupti"] = {"admin_only": True, "root": False}
    f["env_cuda"] = {"torch": "13.1"}
    c = _by_name(doctor.run_rules(f))
    assert c["persistence"].status == "warn" and c["persistence"].fix == "sudo nvidia-smi -pm 1"
    assert c["power limit"].status == "fail" and "GPU 1 450 W" in c["power limit"].message
    assert c["power limit"].fix == "sudo nvidia-smi -i 1 -pl 600"
    assert c["clocks"].status == "fail" and "GPU 1" in c["clocks"].message
    assert c["ecc"].status == "fail" and "0 (4)" in c["ecc"].message
    assert c["processes"].status == "warn" and "pid 4242 on GPU 1 (30000 MiB)" in c["processes"].message
    assert c["free memory"].status == "fail" and "41% free" in c["free memory"].message
    assert c["p2p"].status == "warn" and c["cupti"].status == "warn" and "NVreg_RestrictProfilingToAdminUsers=0" in c["cupti"].fix
    assert c["cuda"].status == "warn" and "13.0 is older than torch 13.1" in c["cuda"].message
    assert c["pcie"].status == "warn" and "x8" in c["pcie"].message
    assert c["host cpu"].status == "ok" and "0.20 of 64 CPUs" in c["host cpu"].message
    f["host"].update(foreign_cores=12.5, steal_share=0.04, foreign_top=[{"pid": 77, "name": "make", "cpu_s": 12.0}])
    c = _by_name(doctor.run_rules(f))
    assert c["host cpu"].status == "warn" and "other processes used 12.5 of 64 CPUs" in c["host cpu"].message
    assert "steal" in c["host cpu"].message and "kill 77" in c["host cpu"].fix
    assert doctor.exit_code(list(c.values())) == 1
    f["env_cuda"] = {"torch": "14.0"}
    assert doctor.cuda_builds(f).status == "fail"
    f["env_cuda"] = {"run": "abcd1234"}  # a run whose env has a CPU torch is not "no env recorded"
    assert "run abcd1234" in doctor.cuda_builds(f).message and "no CUDA build" in doctor.cuda_builds(f).message
    f["env_cuda"] = {}
    assert "run it once" in doctor.cuda_builds(f).message


def test_doctor_without_gpus_says_no_gpu_state():
    f = healthy_facts(nvml={"available": False, "reason": "NVML unavailable (Driver Not Loaded)"})
    c = _by_name(doctor.run_rules(f))
    assert c["gpus"].status == "fail" and "no GPU state" in c["gpus"].message
    assert all(c[n].status == "skip" and c[n].message == "no GPU state" for n in ("persistence", "power limit", "ecc", "pcie"))
    f["recipe"]["gpus"] = 0  # a CPU-only recipe (the miniature) does not need one
    assert doctor.gpus_present(f).status == "warn"


def test_cuda_builds_read_from_an_env_record():
    assert cuda_of_packages(["torch==2.9.1+cu128", "sgl-kernel==0.3.16+cu130", "nvidia-cuda-runtime-cu12==12.8.90",
                             "numpy==2.0"]) == {"torch": "12.8", "sgl-kernel": "13.0", "cuda-runtime": "12.8"}


def test_doctor_command_with_the_double(monkeypatch, home, capsys):
    from toolkit.cli import main

    fake = FakeNvml({"gpus": [gpu(0), gpu(1, limit_w=450.0)]})
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr("toolkit.run.gpustate.owners.pid_namespace_nested", lambda: False)
    monkeypatch.setattr("toolkit.run.gpustate.facts.cupti_access", lambda: {"admin_only": False, "root": False})
    # the host's CPU is sampled for real: CI runs other tests beside this one (a warning with a fix line)
    quiet_host = {"available": True, "window_s": 1.0, "cpus": 2, "busy_cores": 0.1, "own_cores": 0.1,
                  "foreign_cores": 0.0, "steal_share": 0.0, "foreign_top": []}
    monkeypatch.setattr("toolkit.run.gpustate.facts.host_sample", lambda: quiet_host)
    monkeypatch.setattr("toolkit.run.gpustate.owners.patchbench_jobs", lambda home=None: [])  # other tests' servers
    assert main(["doctor", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["schema_version"] == 1 and out["ok"] is False
    checks = {c["name"]: c for c in out["checks"]}
    assert checks["power limit"]["status"] == "fail" and checks["gpus"]["status"] == "ok"
    assert out["facts"]["nvml"]["gpus"][1]["power_limit_w"] == 450.0
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml({"gpus": [gpu(0), gpu(1)]}))
    assert main(["doctor"]) == 0
    text = capsys.readouterr().out
    assert "ok   power limit: 600 W on every GPU" in text and "fix:" not in text
    assert gather(module=FakeNvml(fail_init=True))["nvml"]["available"] is False


def test_gpu_check_judges_a_series_and_doctor_output():
    sys.path.insert(0, str(__import__("conftest").REPO_ROOT / "benchmarks"))
    import gpu_check

    ok, detail = gpu_check.check_series(sample(FakeNvml({"gpus": [gpu(0, power=[450.0, 590.0])]})))
    assert ok, detail
    bad = sample(FakeNvml({"gpus": [gpu(0, sm=0), gpu(1, power=700.0)]}))
    ok, detail = gpu_check.check_series(bad)
    assert not ok and "GPU 0: clocks missing or 0" in detail and "GPU 1: power mean 700 W" in detail
    assert gpu_check.check_series({"available": False, "reason": "no NVIDIA GPU"}) == (False, "no GPU state: no NVIDIA GPU")
    facts = healthy_facts()
    out = json.dumps({"schema_version": 1, "checks": [c.to_dict() for c in doctor.run_rules(facts)]})
    assert gpu_check.doctor_ok(out)[0] and not gpu_check.doctor_ok("oops")[0]


def test_doctor_reads_the_recipe_gpus_and_mem_fraction(tmp_path, monkeypatch, home, capsys):
    from conftest import demo_project
    from toolkit.cli import main

    proj = demo_project(tmp_path, monkeypatch)
    text = (proj / "recipes/demo/baseline.toml").read_text().replace("gpus = 0", "gpus = 2")
    text = text.replace("tp-size = 1", "tp-size = 2\nmem-fraction-static = 0.9\n[server.env]\nCUDA_VISIBLE_DEVICES = \"1,2\"")
    (proj / "recipes/demo/tight.toml").write_text(text)
    # GPU 2 is half full (another job); GPU 0 is not the recipe's and is ignored
    monkeypatch.setattr("toolkit.run.gpustate.owners.pid_namespace_nested", lambda: False)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml({"gpus": [gpu(0, limit_w=300.0), gpu(1), gpu(2, free_mib=48_000)]},
                                                        processes=[(2, 999_999_2, 49_000)]))
    monkeypatch.setattr("toolkit.run.gpustate.facts.cupti_access", lambda: {"admin_only": True, "root": False})
    assert main(["doctor", "demo/tight"]) == 1
    out = capsys.readouterr().out
    assert "fail free memory: GPU 2: 49% free, the recipe's mem-fraction-static 0.9 needs 90%" in out
    assert "warn processes: 1 other process(es) on the GPUs: pid 9999992 on GPU 2 (49000 MiB)" in out
    assert "ok   power limit: 600 W on every GPU" in out  # GPU 0 (300 W) is not the recipe's
    assert "warn cupti" in out and "fix: options nvidia NVreg_RestrictProfilingToAdminUsers=0" in out


def test_doctor_names_another_campaigns_server_and_never_says_kill_it(monkeypatch, home, tmp_path, capsys):
    """A second `patchbench run` on the box (the miniature, 30 s to ready): the doctor names its patchbench
    and run, and where its server holds a GPU (the NVML double) or the CPU, says wait for it, not kill it
    (was: "other process(es) on the GPUs: pid N ... fix: stop them before the campaign (kill N)")."""
    import signal
    import subprocess

    import psutil

    from conftest import REPO_ROOT, demo_project
    from toolkit.cli import main

    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "slowstart.toml").write_text(
        'extends = "demo/baseline"\n[server.args]\nmini-startup-s = 30\n[quality]\nlaunches = 0\n')
    # started by a launcher that exits at once: the sibling is no child of this process (nor of the doctor)
    launcher = subprocess.run(
        [sys.executable, "-c", "import subprocess, sys; print(subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, "
         "stderr=subprocess.DEVNULL, start_new_session=True).pid)", sys.executable, "-m", "toolkit", "run",
         "demo/slowstart", "--repeats", "1"], cwd=proj, capture_output=True, text=True, check=True,
        env={**os.environ, "PATCHBENCH_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)})
    sibling = psutil.Process(int(launcher.stdout))
    try:
        deadline, live = time.monotonic() + 180, []
        while not live and time.monotonic() < deadline and sibling.is_running():
            time.sleep(0.1)
            live = list((home / "live").glob("*.json")) if (home / "live").is_dir() else []
        assert live, "the sibling's server never started"
        record = json.loads(live[0].read_text())
        server = record["pgid"]
        monkeypatch.setitem(sys.modules, "pynvml", FakeNvml({"gpus": [gpu(0)]}, processes=[(0, server, 900)]))
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.setattr("toolkit.run.gpustate.owners.pid_namespace_nested", lambda: False)
        assert main(["doctor", "--json"]) == 0  # warnings only
        out = json.loads(capsys.readouterr().out)
        checks = {c["name"]: c for c in out["checks"]}
        job = next(j for j in out["facts"]["jobs"] if j["owner"] == sibling.pid)
        assert job["alive"] and job["pgid"] == server and job["run_id"] == record["run_id"], job
        jobs = checks["patchbench jobs"]
        assert jobs["status"] == "warn" and f"patchbench pid {sibling.pid} (run {record['run_id'][:8]}) runs a server" \
            in jobs["message"], jobs
        procs = checks["processes"]
        assert f"pid {server} on GPU 0 (900 MiB) [patchbench pid {sibling.pid} run {record['run_id'][:8]}: another " \
               "campaign running]" in procs["message"], procs
        assert "kill" not in procs["fix"].replace("do not kill", "") and f"wait for patchbench pid {sibling.pid}" \
            in procs["fix"], procs
        import re

        killed = {int(n) for c in out["checks"] for part in re.findall(r"kill ([\d ]+)", c["fix"]) for n in part.split()}
        assert not killed & set(job["pids"]), out["checks"]  # no fix line hands the sibling's processes to kill
    finally:
        if sibling.is_running():
            sibling.send_signal(signal.SIGINT)
            psutil.wait_procs([sibling], timeout=60)
