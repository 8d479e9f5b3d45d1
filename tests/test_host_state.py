"""The host's CPU over the benchmark window (toolkit.run.hoststate): the arithmetic of the record
(pure), and a run on the miniature beside a real CPU burner: the burner's time is foreign, the
server's is the run's own, and `results` / `compare` show the flag."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time

import psutil

from toolkit.results import box_flags
from toolkit.run.hoststate import summarize


def _proc(name, created, cpu, children=0.0):
    return {"name": name, "created": created, "cpu": cpu, "children": children}


def test_the_window_splits_the_machines_cpu_time_into_own_foreign_and_steal():
    cpu0 = {"user": 100.0, "nice": 0.0, "system": 20.0, "irq": 0.0, "softirq": 0.0, "idle": 500.0, "iowait": 0.0,
            "steal": 1.0}
    # 10 s on 2 CPUs: 14 s busy (user+system), 5 s idle, 1 s stolen
    cpu1 = {**cpu0, "user": 112.0, "system": 22.0, "idle": 505.0, "steal": 2.0}
    before = {1: _proc("patchbench", 1.0, 5.0), 2: _proc("sglang::scheduler", 2.0, 50.0),
              7: _proc("yes", 3.0, 0.0), 9: _proc("old", 4.0, 30.0)}
    after = {1: _proc("patchbench", 1.0, 6.0, children=2.0),  # a child reaped in the window: 2 s through its parent
             2: _proc("sglang::scheduler", 2.0, 55.0),
             3: _proc("sglang::detokenizer", 8.0, 0.5),  # started in the window: all of it counts
             7: _proc("yes", 3.0, 4.0),
             9: _proc("new-with-old-pid", 9.0, 1.0)}  # pid 9 reused: counted from zero, not 1 - 30
    host = summarize(cpu0, cpu1, before, after, own={1, 2, 3}, window_s=10.0, cpus=2)
    assert host["busy_cores"] == 1.4 and host["own_cores"] == 0.85  # (1 + 2 + 5 + 0.5) / 10
    assert host["foreign_cores"] == 0.55 and host["steal_share"] == round(1 / 20, 4)
    assert [p["name"] for p in host["foreign_top"]] == ["yes", "new-with-old-pid"]
    flags = box_flags.host_flags(host)
    assert flags[0].startswith("other processes used 0.6 of 2 CPUs over the window (pid 7 yes 4.00 s")
    assert flags[1] == "the hypervisor gave 5% of the CPU time to other guests (steal)"
    quiet = summarize(cpu0, {**cpu0, "user": 110.0, "idle": 510.0}, before, {**before, 2: _proc("s", 2.0, 60.0)},
                      own={1, 2}, window_s=10.0, cpus=2)
    assert quiet["foreign_cores"] == 0.0 and box_flags.host_flags(quiet) == []
    assert box_flags.host_flags({"available": False}) == []


BENCH = """
driver = "serving"
input_len = 16
output_len = 16
concurrency = [1, 2, 4]
num_prompts = 4
warmup = 1
repeats = 4
"""


def test_a_cpu_burner_beside_a_run_is_foreign_and_flagged(tmp_path, home, monkeypatch, capsys):
    """A real `python -c 'while True: pass'` runs through a miniature run: the record counts its CPU
    time as foreign (at least what psutil saw it use), the server's as the run's own; `results`
    shows the flag in the box column (beside "no GPU state"), `compare` lists it, and so does a
    sequential `run` whose pair did not settle."""
    from conftest import demo_project, shrink_demo_benchmark
    from toolkit.cli import main
    from toolkit.results.store import Store

    # 6 launches: the demo's benchmark (~8 s each) made ~1.5 s; still 3 points and a window of seconds,
    # the server asleep between its paced steps while the burner runs
    shrink_demo_benchmark(demo_project(tmp_path, monkeypatch), BENCH, quality_count=4)
    with foreign_burner() as burner:
        t0, before = time.monotonic(), burner.cpu_times()
        assert main(["run", "demo/baseline", "--repeats", "1"]) == 0
        t1, after = time.monotonic(), burner.cpu_times()
    (run,) = Store(home / "results.sqlite").runs()
    host = run.extra["host_state"]
    assert host["available"] and host["cpus"] == psutil.cpu_count()
    burned = (after.user + after.system - before.user - before.system) / (t1 - t0)  # its rate, in cores
    assert host["foreign_cores"] >= 0.8 * min(burned, 1.0) > 0, (host, burned)  # the window is inside the run
    assert host["own_cores"] > 0  # the miniature server and the client are the run's own
    flags = box_flags.host_flags(host)
    assert flags and flags[0].startswith("other processes used"), host
    capsys.readouterr()
    assert main(["results"]) == 0
    text = capsys.readouterr().out
    assert "foreign" in text and "no GPU state" in text
    # a second recipe, run without the burner: compare lists the first run's flag among its box lines
    # (an A/A pair of two configurations: a recipe identical to the baseline would be its own runs twice)
    (tmp_path / "proj" / "recipes" / "demo" / "again.toml").write_text(
        'extends = "demo/baseline"\n[server.env]\nPATCHBENCH_TEST_SIDE = "again"\n')
    assert main(["run", "demo/again", "--repeats", "1"]) == 0
    capsys.readouterr()
    assert main(["compare", "demo/baseline", "demo/again", "--json"]) == 0
    box = json.loads(capsys.readouterr().out)["box"]
    assert any(line.startswith(f"demo/baseline run {run.run_id[:8]}: other processes used") for line in box), box
    assert box[-1] == "no GPU state recorded for the runs used"
    # a sequential run whose pair does not settle (an indifference zone of 0.1% is out of reach at 2
    # launches each) says what else ran on the box beside its runs
    with foreign_burner():
        assert main(["run", "demo/baseline", "demo/again", "--max-repeats", "2", "--min-effect", "0.001", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not all(v["settled"] for v in out["sequential"]), out["sequential"]  # 3 points: one A/A false call at most
    assert any(": other processes used" in line for line in out["box"]), out["box"]


def test_the_doctor_names_ten_busy_processes_to_the_hundredth_and_counts_the_rest():
    """doctor's 1 s window on a busy box: it named only the top 3 and printed 0.38 s as "0 s". Now up to
    DOCTOR_TOP are named with their seconds to the hundredth, and the rest are counted apart."""
    from toolkit.run.gpustate.facts import DOCTOR_TOP

    cpu0 = {"user": 100.0, "nice": 0.0, "system": 0.0, "idle": 100.0, "steal": 0.0}
    cpu1 = {**cpu0, "user": 101.9, "idle": 100.1}  # 1 s on 2 CPUs, 1.9 CPUs busy
    before = {pid: _proc(f"burner{pid}", 1.0, 0.0) for pid in range(100, 114)}
    after = {pid: _proc(f"burner{pid}", 1.0, 0.38 - 0.02 * (pid - 100)) for pid in range(100, 114)}
    host = summarize(cpu0, cpu1, before, after, own=set(), window_s=1.0, cpus=2, top=DOCTOR_TOP)
    assert [p["pid"] for p in host["foreign_top"]] == list(range(100, 110))
    assert host["foreign_rest"] == {"processes": 4, "cpu_s": round(0.18 + 0.16 + 0.14 + 0.12, 2)}
    [flag] = box_flags.host_flags(host)
    assert "pid 100 burner100 0.38 s, pid 101 burner101 0.36 s" in flag and " 0 s" not in flag
    assert flag.endswith("4 other processes 0.60 s together)")


@contextlib.contextmanager
def foreign_burner():
    """A process spinning on a CPU that is not a descendant of this one (patchbench's own tree would
    count it as the run's): a short-lived parent starts it and exits, and init adopts it."""
    # niced: it takes what the box leaves idle (a whole CPU on a quiet box), not CI's other tests' share
    spawn = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import os; os.nice(19)\\nwhile True: pass'], "
             "start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, "
             "stderr=subprocess.DEVNULL); print(p.pid)")
    burner = psutil.Process(int(subprocess.run([sys.executable, "-c", spawn], capture_output=True, text=True,
                                               check=True).stdout))
    try:
        assert burner.pid not in {c.pid for c in psutil.Process().children(recursive=True)}
        yield burner
    finally:
        burner.kill()
