"""Which GPUs a run's GPU state covers, and whose processes are on them (toolkit.run.gpustate.scope,
owners), with the NVML double: the recipe's layout within CUDA_VISIBLE_DEVICES, CUDA entries mapped
by UUID / PCI bus id / MIG, graphics and the server's own tree never foreign, pids that cannot be
matched said, deprecated getters only without their successors, missing readings said."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from nvml_double import FakeNvml, gpu
from toolkit.errors import BadInput
from toolkit.run.gpustate import doctor, owners
from toolkit.run.gpustate.facts import gpu_facts
from toolkit.run.gpustate.nvml import open_nvml
from toolkit.run.gpustate.sampler import Sampler
from toolkit.run.gpustate.scope import layout_positions, resolve
from toolkit.run.gpustate.summary import summarize


def sample(fake, environ=None, seconds=0.05, **kw) -> dict:
    kw = {"matchable": True, **kw}
    s = Sampler(module=fake, environ=environ or {}, interval_s=0.01, **kw).start()
    time.sleep(seconds)
    return s.stop()


def ticks(fake, n: int) -> dict:
    """Exactly `n` readings: the thread takes tick 0 and waits; the rest are taken by hand."""
    s = Sampler(module=fake, environ={}, interval_s=3600, matchable=True).start()
    while not s.t:
        time.sleep(0.001)
    for i in range(1, n):
        s._tick(i)
    return s.stop()


def eight(**kw) -> FakeNvml:
    return FakeNvml({"gpus": [gpu(i) for i in range(8)]}, **kw)


@pytest.mark.parametrize("args, want", [
    ({"tp-size": 1}, [0]),
    ({"tp-size": 2}, [0, 1]),
    ({"tp-size": 4}, [0, 1, 2, 3]),
    ({"tp-size": 2, "base-gpu-id": 4}, [4, 5]),
    ({"tp_size": 2, "dp_size": 2}, [0, 1, 2, 3]),  # ServerArgs field names (/server_info, the static check)
    ({"tp-size": 4, "dp-size": 4, "enable-dp-attention": True}, [0, 1, 2, 3]),  # DP attention: dp within tp
    ({"tp-size": 4, "attn-dp-size": 4}, [0, 1, 2, 3]),  # 0.5.23's spelling of it
    ({"tp_size": 4, "dp_size": 1, "attn_dp_size": 4, "enable_dp_attention": True}, [0, 1, 2, 3]),  # 0.5.23 resolved
    ({"tp-size": 2, "pp-size": 2, "base-gpu-id": 2}, [2, 3, 4, 5]),
    ({"tp-size": 4, "gpu-id-step": 2}, [0, 2, 4, 6]),
])
def test_the_layout_names_the_cuda_devices_sglang_uses(args, want):
    assert layout_positions(args) == want


@pytest.mark.parametrize("args, gpus", [
    ({"tp-size": 8, "dp-size": 8, "enable-dp-attention": True}, 8),  # attention DP within tp: not 64
    ({"tp-size": 8, "attn-dp-size": 8}, 8),
    ({"tp-size": 4, "dp-size": 2}, 8),  # two replicas
    ({"tp-size": 2, "pp-size": 2}, 4),
    ((("tp-size", "2"),), 2),  # a recipe's (name, value) pairs
])
def test_a_launch_holds_the_gpus_its_layout_names(args, gpus):
    """What GPU minutes and per-GPU throughput are counted with (toolkit.analysis.launch_cost.gpus_of)."""
    from toolkit.analysis.launch_cost import gpus_of

    assert gpus_of(args) == gpus


def test_the_layout_line_says_attention_dp_however_it_is_written():
    from toolkit.run.gpustate.scope import describe_layout

    for args in ({"tp-size": 8, "dp-size": 8, "enable-dp-attention": True}, {"tp-size": 8, "attn-dp-size": 8},
                 {"tp_size": 8, "dp_size": 1, "attn_dp_size": 8, "enable_dp_attention": True}):
        assert describe_layout(args) == "tp 8 attention DP 8 (within tp) from base-gpu-id 0"
    assert describe_layout({"tp-size": 2, "dp-size": 2}) == "tp 2 dp 2 from base-gpu-id 0"


def test_a_bad_layout_value_is_bad_input():
    with pytest.raises(BadInput, match="tp-size='two' is not an integer"):
        layout_positions({"tp-size": "two"})


def test_a_tp2_recipe_on_an_8_gpu_box_samples_its_2_gpus():
    fake = eight(processes=[(5, 999_999_5, 30_000)])  # a job on a GPU the recipe never touches
    record = sample(fake, positions=layout_positions({"tp-size": 2}))
    assert [g["index"] for g in record["gpus"]] == [0, 1]
    assert summarize(record)["metrics"]["gpu_foreign_processes"] == 0
    shifted = sample(eight(processes=[(5, 999_999_5, 30_000)]), positions=layout_positions({"tp-size": 2, "base-gpu-id": 4}))
    assert [g["index"] for g in shifted["gpus"]] == [4, 5]
    assert [p["pid"] for p in shifted["foreign_processes"]] == [999_999_5]


def test_the_doctor_judges_only_the_recipes_gpus():
    fake = FakeNvml({"gpus": [gpu(0), gpu(1), gpu(2, free_mib=1_000), gpu(3, limit_w=300.0)]})
    facts = {"nvml": gpu_facts(fake, {}, layout_positions({"tp-size": 2}), matchable=True),
             "recipe": {"name": "r", "gpus": 2, "mem_fraction_static": 0.85, "layout": "tp 2 from base-gpu-id 0"}}
    c = {x.name: x for x in doctor.run_rules(facts)}
    assert c["gpus"].status == "ok" and "CUDA 0 = GPU 0, CUDA 1 = GPU 1" in c["gpus"].message
    assert c["free memory"].status == "ok" and c["power limit"].status == "ok"
    facts["nvml"] = gpu_facts(fake, {}, layout_positions({"tp-size": 2, "base-gpu-id": 3}), matchable=True)
    c = {x.name: x for x in doctor.run_rules(facts)}
    assert c["gpus"].status == "fail" and "uses CUDA device(s) 4 but 4 are visible" in c["gpus"].message


def test_cuda_entries_map_to_nvml_by_uuid_and_by_pci_bus_id():
    # NVML numbers the display card (bus 0x01) second; CUDA's PCI order puts it first
    fake = FakeNvml({"gpus": [gpu(0, uuid="GPU-aaaa-compute", bus_id="00000000:81:00.0"),
                              gpu(1, uuid="GPU-bbbb-display", bus_id="00000000:01:00.0", sm=1500)]})
    by_uuid = sample(fake, {"CUDA_VISIBLE_DEVICES": "GPU-aaaa"})
    assert [(g["index"], g["cuda"]) for g in by_uuid["gpus"]] == [(0, 0)]
    assert by_uuid["scope"]["devices"][0]["by"] == "uuid"
    by_index = sample(fake, {"CUDA_VISIBLE_DEVICES": "0"})
    assert [g["index"] for g in by_index["gpus"]] == [1]  # CUDA 0 is the GPU first on the PCI bus
    unset = sample(fake, positions=[1])
    assert [g["uuid"] for g in unset["gpus"]] == ["GPU-aaaa-compute"]
    # a bad entry stops the list, as CUDA stops there
    nv, _ = open_nvml(fake)
    scope = resolve(nv, "GPU-bbbb,GPU-zzzz,GPU-aaaa")
    assert [d.index for d in scope.devices] == [1] and scope.unmatched == ["GPU-zzzz", "GPU-aaaa"]


def test_mixed_gpus_under_cuda_default_order_are_noted():
    fake = FakeNvml({"gpus": [gpu(0), gpu(1, name="NVIDIA RTX A2000")]})
    nv, _ = open_nvml(fake)
    assert any("FASTEST_FIRST" in n for n in resolve(nv, "0").notes)
    assert not any("CUDA_DEVICE_ORDER" in n for n in resolve(nv, "0", order="PCI_BUS_ID").notes)
    assert not any("CUDA_DEVICE_ORDER" in n for n in resolve(nv, "GPU-00000001").notes)  # a UUID is unambiguous


def test_a_mig_instance_maps_to_its_parent_gpu():
    fake = FakeNvml({"gpus": [gpu(0), gpu(1, mig=("MIG-1111-aaaa", "MIG-2222-bbbb"))]},
                    processes=[(1, 999_999_1, 4_000, 0), (1, 999_999_2, 9_000, 1)])
    record = sample(fake, {"CUDA_VISIBLE_DEVICES": "MIG-2222-bbbb"})
    (g,) = record["gpus"]
    assert g["index"] == 1 and g["mig"] == "MIG-2222-bbbb" and g["series"]["sm_mhz"][0] == 2400
    assert "MIG instance MIG-2222-bbbb of GPU 1" in record["scope"]["notes"][0]
    assert [p["pid"] for p in record["foreign_processes"]] == [999_999_2]  # the other instance's job is not on ours
    legacy = sample(fake, {"CUDA_VISIBLE_DEVICES": "MIG-GPU-00000001-fake/1/0"})
    assert legacy["gpus"][0]["index"] == 1


def test_cuda_visible_devices_matching_nothing_fails_the_doctor():
    for value in ("MIG-nope", "GPU-nope", "9", ""):
        facts = {"nvml": gpu_facts(FakeNvml(), {"CUDA_VISIBLE_DEVICES": value}, matchable=True),
                 "recipe": {"name": "r", "gpus": 1, "layout": "tp 1 from base-gpu-id 0"}}
        check = doctor.gpus_present(facts)
        assert check.status == "fail" and f"CUDA_VISIBLE_DEVICES={value} matches no NVIDIA GPU" in check.message
        checks = {c.name: c for c in doctor.run_rules(facts)}
        assert doctor.exit_code(list(checks.values())) == 1
        assert checks["processes"].status == "skip" and checks["processes"].message == "no GPU of the run visible"


def test_graphics_processes_are_not_foreign():
    fake = FakeNvml({"gpus": [gpu(0)]}, graphics=[(0, 999_999_7, 300)])
    record = sample(fake)
    assert record["foreign_processes"] == [] and [p["pid"] for p in record["graphics_processes"]] == [999_999_7]
    assert summarize(record)["metrics"]["gpu_foreign_processes"] == 0
    c = doctor.processes({"nvml": gpu_facts(fake, {}, matchable=True)})
    assert c.status == "ok" and "graphics (not counted): pid 9999997 on GPU 0" in c.message


def test_the_servers_own_tree_is_not_foreign():
    # the "server" runs in its own session and has a child of its own (a scheduler, say)
    server = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
                               "print(c.pid, flush=True); time.sleep(30)"],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        grandchild = int(server.stdout.readline())
        fake = FakeNvml({"gpus": [gpu(0)]}, processes=[(0, grandchild, 60_000), (0, 999_999_3, 1_000)])
        record = sample(fake, own_tree=lambda: owners.patchbench_tree(server.pid))
    finally:
        server.kill()
        server.wait()
    assert [p["pid"] for p in record["foreign_processes"]] == [999_999_3]
    assert grandchild in owners.classify([{"pid": grandchild, "kind": "compute"}], {grandchild})["own"][0].values()


def test_pids_that_cannot_be_matched_are_said_never_guessed(tmp_path):
    status, host, container = tmp_path / "status", tmp_path / "host-ns", tmp_path / "container-ns"
    host.symlink_to("pid:[4026531836]")  # the kernel's initial PID namespace
    container.symlink_to("pid:[4026532561]")
    status.write_text("Name:\tpython\nNSpid:\t4242\t17\n")
    assert owners.pid_namespace_nested(status, host) is True
    status.write_text("Name:\tpython\nNSpid:\t4242\n")
    assert owners.pid_namespace_nested(status, host) is False
    # a container mounts its own /proc: NSpid lists one pid there, the namespace is not the initial one
    assert owners.pid_namespace_nested(status, container) is True
    fake = FakeNvml({"gpus": [gpu(0)]}, processes=[(0, 999_999_4, 60_000)])
    record = sample(fake, matchable=False)
    assert record["foreign_processes"] == [] and [p["pid"] for p in record["unmatched_processes"]] == [999_999_4]
    assert "cannot be matched" in record["pid_match"]
    c = doctor.processes({"nvml": gpu_facts(fake, {}, matchable=False)})
    assert c.status == "warn" and "cannot be matched" in c.message and "pid 9999994" in c.message


def test_a_missing_reading_is_said_and_gpu_check_does_not_crash():
    sys.path.insert(0, str(__import__("conftest").REPO_ROOT / "benchmarks"))
    import gpu_check

    record = ticks(FakeNvml({"gpus": [gpu(0, n=4, sm=[None, 2400, 2300, None], temp=None)]}), 4)
    g = record["gpus"][0]
    assert None in g["series"]["sm_mhz"] and "Not Supported" in g["unread"]["temp_c"]
    assert "nvmlDeviceGetTemperatureV" in g["unread"]["temp_c"]
    ok, detail = gpu_check.check_series(record)
    assert not ok and "temperature missing or 0 (nvmlDeviceGetTemperatureV: NVMLError: Not Supported)" in detail
    assert any(line.startswith("temp_c on GPU 0") for line in summarize(record)["unread"])
    ok, detail = gpu_check.check_series(ticks(FakeNvml({"gpus": [gpu(0, n=4, sm=[None, 2400, 2300, 2350])]}), 4))
    assert ok and "SM 2300-2400 MHz" in detail and "1 SM clock reading(s) missing" in detail, detail


def test_successor_getters_first_deprecated_only_when_absent():
    record = sample(FakeNvml({"gpus": [gpu(0)]}))
    getters = record["gpus"][0]["getters"]
    assert getters["temp_c"] == "nvmlDeviceGetTemperatureV" and getters["app_sm"] == "nvmlDeviceGetClock"
    assert getters["reasons"] == "nvmlDeviceGetCurrentClocksEventReasons"
    old = FakeNvml({"gpus": [gpu(0)]}, absent={"nvmlDeviceGetTemperatureV", "nvmlDeviceGetClock",
                                               "nvmlDeviceGetCurrentClocksEventReasons"})
    record = sample(old)
    getters = record["gpus"][0]["getters"]
    assert getters["temp_c"] == "nvmlDeviceGetTemperature" and getters["app_sm"] == "nvmlDeviceGetApplicationsClock"
    assert getters["reasons"] == "nvmlDeviceGetCurrentClocksThrottleReasons"
    assert record["gpus"][0]["series"]["temp_c"][0] == 65
    c = doctor.readings({"nvml": gpu_facts(old, {}, matchable=True)})
    old_used = c.message.split("lacks their successors: ")[1].split(", ")
    assert c.status == "warn" and "nvmlDeviceGetTemperature" in old_used and c.fix == "pip install -U nvidia-ml-py"
    gone = FakeNvml({"gpus": [gpu(0)]}, absent={"nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"})
    g = sample(gone)["gpus"][0]
    assert g["series"]["temp_c"][0] is None and "no getter in this nvidia-ml-py" in g["unread"]["temp_c"]


def test_locked_clocks_are_said_unreadable_or_seen_holding_the_clocks():
    facts = {"nvml": gpu_facts(FakeNvml({"gpus": [gpu(0)]}), {}, matchable=True)}
    c = doctor.locked_clocks(facts)
    assert c.status == "skip" and "NVML has no getter for locked clocks" in c.message
    held = {"nvml": gpu_facts(FakeNvml({"gpus": [gpu(0, reasons_now=0x2)]}), {}, matchable=True)}
    c = doctor.locked_clocks(held)
    assert c.status == "warn" and "holds the clocks of GPU 0" in c.message and "nvidia-smi -rgc" in c.fix
    record = sample(FakeNvml({"gpus": [gpu(0, reasons=0x2)]}))
    assert summarize(record)["clock_setting_share"] == 1.0


def test_an_index_on_a_gpu_with_mig_instances_is_noted():
    nv, _ = open_nvml(FakeNvml({"gpus": [gpu(0, mig=("MIG-1111-aaaa",))]}))
    scope = resolve(nv, "0")
    assert [d.index for d in scope.devices] == [0] and "name it by its MIG-UUID" in scope.notes[0]


def test_a_mig_instance_is_judged_by_its_own_memory_and_unmatched_pids_reach_compare():
    fake = FakeNvml({"gpus": [gpu(0, free_mib=10_000, mig=("MIG-1111-aaaa", "MIG-2222-bbbb"))]})
    facts = {"nvml": gpu_facts(fake, {"CUDA_VISIBLE_DEVICES": "MIG-1111-aaaa"}, matchable=True),
             "recipe": {"name": "r", "gpus": 1, "mem_fraction_static": 0.85}}
    (g,) = facts["nvml"]["gpus"]
    assert g["mig"] == "MIG-1111-aaaa" and g["mem_total_mib"] == 97_887 // 2  # the instance, not the whole GPU
    assert doctor.free_memory(facts).status == "ok"  # the GPU is 10% free, the instance nearly all
    from types import SimpleNamespace

    from toolkit.results import box_flags as flags

    summary = summarize(sample(FakeNvml({"gpus": [gpu(0)]}, processes=[(0, 999_999_4, 1)]), matchable=False))
    run = SimpleNamespace(run_id="abcdef123456", recipe="r", gpu_key="1x G", extra={"gpu_state": summary})
    assert flags.run_flags([run]) == {"abcdef123456": []}  # not flagged: nothing is guessed
    (line,) = flags.box_lines([run])
    assert line.startswith("r run abcdef12: foreign processes not checked: NVML reports host PIDs")


def test_the_runs_layout_is_read_from_server_info_then_the_static_check_then_the_recipe():
    from types import SimpleNamespace

    from toolkit.run.gpustate.record import server_layout

    recipe = SimpleNamespace(server=SimpleNamespace(args={"tp-size": 1, "base-gpu-id": 2}))
    attempt = SimpleNamespace(prepared=SimpleNamespace(recipe=recipe, check=SimpleNamespace(fields={"tp_size": 2})),
                              info={})
    assert layout_positions(server_layout(attempt)) == [2, 3]
    attempt.info = {"tp_size": 4, "base_gpu_id": 0, "nested": {"tp_size": 8}}
    assert layout_positions(server_layout(attempt)) == [0, 1, 2, 3]


def test_a_getter_the_driver_lacks_falls_back_to_the_older_one():
    """nvidia-ml-py 13.615 has nvmlDeviceGetTemperatureV, an R550 driver's libnvidia-ml does not
    (NVML_ERROR_FUNCTION_NOT_FOUND at call time): the deprecated getter the driver has answers."""
    old_driver = FakeNvml({"gpus": [gpu(0)]}, driver_lacks={"nvmlDeviceGetTemperatureV",
                                                            "nvmlDeviceGetCurrentClocksEventReasons"})
    g = sample(old_driver)["gpus"][0]
    assert g["series"]["temp_c"][0] == 65 and g["getters"]["temp_c"] == "nvmlDeviceGetTemperature"
    assert g["getters"]["reasons"] == "nvmlDeviceGetCurrentClocksThrottleReasons" and "temp_c" not in g["unread"]
    neither = FakeNvml({"gpus": [gpu(0)]}, driver_lacks={"nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"})
    g = sample(neither)["gpus"][0]
    assert g["series"]["temp_c"][0] is None and "Function Not Found" in g["unread"]["temp_c"]


def test_a_process_list_nvml_refuses_is_unknown_not_none():
    refusing = FakeNvml({"gpus": [gpu(0)]}, processes=[(0, 999_999_5, 1_000)],
                        refuse={"nvmlDeviceGetComputeRunningProcesses": "No Permission"})
    record = sample(refusing)
    summary = summarize(record)
    assert "gpu_foreign_processes" not in summary["metrics"]  # unknown, never a measured 0
    assert any(line.startswith("processes on GPU 0") and "No Permission" in line for line in summary["unread"])
    c = doctor.processes({"nvml": gpu_facts(refusing, {}, matchable=True)})
    assert c.status == "warn" and "did not list the processes of GPU 0" in c.message and "No Permission" in c.message
    assert summarize(sample(FakeNvml({"gpus": [gpu(0)]})))["metrics"]["gpu_foreign_processes"] == 0
    assert "gpu_foreign_processes" not in summarize(sample(FakeNvml({"gpus": [gpu(0)]}), matchable=False))["metrics"]


def test_doctor_pcie_with_a_gpu_that_does_not_report_its_generation():
    quiet = {"nvml": {"available": True, "gpus": [{"index": 0, "pcie": {"max_gen": None, "max_width": 16}},
                                                  {"index": 1, "pcie": {"max_gen": 5, "max_width": 16}}]}}
    assert doctor.pcie(quiet).status == "ok" and "Gen5 x16" in doctor.pcie(quiet).message
    quiet["nvml"]["gpus"][1]["pcie"]["max_gen"] = None
    assert "GenNone" not in doctor.pcie(quiet).message


def test_doctor_says_an_old_driver_is_read_through_the_deprecated_getters():
    old_driver = FakeNvml({"gpus": [gpu(0)]}, driver_lacks={"nvmlDeviceGetTemperatureV"})
    c = doctor.readings({"nvml": gpu_facts(old_driver, {}, matchable=True)})
    assert c.status == "ok" and "the driver's NVML lacks nvmlDeviceGetTemperatureV" in c.message, c
