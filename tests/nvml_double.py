"""A test double of the `pynvml` module (nvidia-ml-py) that replays recorded series.

`FakeNvml(record)` takes a record in the format the sampler writes (`gpu_state.json`: {"driver",
"cuda_driver", "gpus": [{name, uuid, power_limit_w, persistence, ..., "series": {sm_mhz: [...], ...}}]}),
so a series recorded on a real box replays here. Each `nvmlDeviceGetPowerUsage` call moves that
GPU to its next reading (cycling); the other readings return the current one. `processes` lists
(gpu index, pid, MiB[, MIG instance]) of compute processes (a record's own "processes" wins),
`graphics` the same for graphics processes (Xorg); a gpu's `mig` names its MIG instances' UUIDs
(their handles are (gpu, j)); `absent` names pynvml functions this binding lacks (an older or newer
nvidia-ml-py: the deprecated getters' successors, say), `driver_lacks` functions the binding has
and the driver's libnvidia-ml does not (an older driver: NVML_ERROR_FUNCTION_NOT_FOUND at call time),
`refuse` {function: NVML's answer} calls NVML refuses (NoPermission, say); each gpu's
`ecc_counts` are the uncorrected counts read in turn; `sessions` are records replayed one per
`nvmlInit` (one per run: run 1 steady, run 2 throttled, ...).
Install it with `monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(...))` or pass it as `module`.
"""

from __future__ import annotations

import types
from types import SimpleNamespace

MIB = 2**20


class NVMLError(Exception):
    pass


class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801 - pynvml's name
    value = 13  # NVML_ERROR_FUNCTION_NOT_FOUND

    def __str__(self):
        return "Function Not Found"


def gpu(index: int = 0, *, n: int = 20, sm: float | list = 2400, mem: float = 14001, power: float | list = 450.0,
        temp: float | list = 65, reasons: int | list = 0, util: int = 98, used_mib: int = 60_000,
        limit_w: float = 600.0, name: str = "NVIDIA RTX PRO 6000 Blackwell Server Edition", persistence: bool = True,
        ecc: tuple = (0, 0), pcie: tuple = (5, 16), app_sm: int | None = None, total_mib: int = 97_887,
        free_mib: int | None = None, uuid: str | None = None, bus_id: str | None = None, mig: tuple = (),
        reasons_now: int = 0) -> dict:
    """One GPU's recorded facts and `n` ticks of series (a scalar repeats; a list is used as is;
    None in a series is a reading NVML refuses). `bus_id` defaults to NVML's order."""
    def col(v):
        return list(v) if isinstance(v, list) else [v] * n

    return {"index": index, "name": name, "uuid": uuid or f"GPU-{index:08d}-fake", "mig": list(mig),
            "bus_id": bus_id or f"00000000:{0x10 + index:02X}:00.0", "reasons_now": reasons_now, "power_limit_w": limit_w,
            "default_power_limit_w": 600.0, "persistence": persistence, "ecc_mode": True, "ecc_counts": list(ecc),
            "app_clocks": {"sm": app_sm, "mem": None}, "default_app_clocks": {"sm": None, "mem": None},
            "max_clocks": {"sm": 3090, "mem": 14001}, "mem_total_mib": total_mib,
            "mem_free_mib": total_mib - 600 if free_mib is None else free_mib,
            "pcie": {"gen": pcie[0], "width": pcie[1], "max_gen": 5, "max_width": 16},
            "series": {"sm_mhz": col(sm), "mem_mhz": col(mem), "power_w": col(power), "temp_c": col(temp),
                       "reasons": col(reasons), "util_pct": col(util), "mem_used_mib": col(used_mib)}}


class FakeNvml(types.ModuleType):
    """The pynvml functions patchbench calls, answering from `record`."""

    NVMLError = NVMLError

    def __init__(self, record: dict | None = None, *, processes: list[tuple] = (), graphics: list[tuple] = (),
                 fail_init: bool = False, p2p_ok: bool = True, topology: int = 30, sessions: list[dict] = (),
                 absent: set[str] | frozenset = frozenset(), driver_lacks: set[str] | frozenset = frozenset(),
                 refuse: dict[str, str] | None = None):
        super().__init__("pynvml")
        self.absent = set(absent)
        self.driver_lacks, self.refuse = set(driver_lacks), dict(refuse or {})
        self.graphics = [tuple(p) for p in graphics]
        self.sessions = list(sessions) or [record or {"gpus": [gpu(0)]}]
        self.procs_default = list(processes)
        self.fail_init, self.p2p_ok, self.topology = fail_init, p2p_ok, topology
        self.inits = 0
        self.calls = 0
        self.initialised = False
        self._load(self.sessions[0])

    def _load(self, record: dict) -> None:
        """Replay `record` from its first tick (each nvmlInit takes the next of `sessions`)."""
        self.record = record
        self.gpus = record["gpus"]
        self.procs = [tuple(p) for p in record.get("processes", self.procs_default)]
        self.pos = [-1] * len(self.gpus)
        self.ecc_reads = [0] * len(self.gpus)

    def __getattribute__(self, name):
        if name.startswith("nvml") and name in object.__getattribute__(self, "absent"):
            raise AttributeError(name)  # this nvidia-ml-py has no such function
        if name.startswith("nvml") and name in object.__getattribute__(self, "driver_lacks"):
            def lacking(*args):
                raise NVMLError_FunctionNotFound()
            return lacking
        if name.startswith("nvml") and name in object.__getattribute__(self, "refuse"):
            answer = object.__getattribute__(self, "refuse")[name]

            def refused(*args):
                raise NVMLError(answer)
            return refused
        return object.__getattribute__(self, name)

    # -- helpers ---------------------------------------------------------------------------------
    def _g(self, h):
        self.calls += 1
        if isinstance(h, tuple):  # a MIG instance: device-wide readings are the parent's
            raise NVMLError("Not Supported")
        return self.gpus[h]

    def _now(self, h, field):
        col = self._g(h)["series"][field]
        v = col[max(self.pos[h], 0) % len(col)]
        if v is None:
            raise NVMLError("Not Supported")
        return v

    # -- the API ---------------------------------------------------------------------------------
    def nvmlInit(self):
        if self.fail_init:
            raise NVMLError("Driver Not Loaded")
        self._load(self.sessions[self.inits % len(self.sessions)])
        self.inits += 1
        self.initialised = True

    def nvmlShutdown(self):
        self.initialised = False

    def nvmlSystemGetDriverVersion(self):
        return self.record.get("driver", "580.65.06")

    def nvmlSystemGetCudaDriverVersion(self):
        major, _, minor = str(self.record.get("cuda_driver", "13.0")).partition(".")
        return int(major) * 1000 + int(minor or 0) * 10

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        if not 0 <= i < len(self.gpus):
            raise NVMLError("Invalid Argument")
        return i

    def nvmlDeviceGetName(self, h):
        return self._g(h)["name"]

    def nvmlDeviceGetUUID(self, h):
        if isinstance(h, tuple):
            return self.gpus[h[0]]["mig"][h[1]]
        return self._g(h)["uuid"]

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._g(h)["bus_id"].encode())

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return len(self._g(h)["mig"])

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, j):
        if not 0 <= j < len(self._g(h)["mig"]):
            raise NVMLError("Not Found")
        return (h, j)

    def nvmlDeviceGetPowerUsage(self, h):
        self.pos[h] += 1
        return int(self._now(h, "power_w") * 1000)

    def nvmlDeviceGetClockInfo(self, h, kind):
        return self._now(h, "sm_mhz" if kind == 1 else "mem_mhz")

    def nvmlDeviceGetTemperatureV(self, h, sensor):
        return self._now(h, "temp_c")

    def nvmlDeviceGetTemperature(self, h, sensor):  # deprecated in nvidia-ml-py 13.x
        return self._now(h, "temp_c")

    def _reasons(self, h):
        return self._now(h, "reasons") if self.pos[h] >= 0 else self._g(h)["reasons_now"]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._reasons(h)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):  # deprecated in nvidia-ml-py 13.x
        return self._reasons(h)

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=self._now(h, "util_pct"), memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):
        if isinstance(h, tuple):  # a MIG instance: an equal slice of its GPU, nearly free
            total = self.gpus[h[0]]["mem_total_mib"] // len(self.gpus[h[0]]["mig"])
            return SimpleNamespace(total=total * MIB, used=100 * MIB, free=(total - 100) * MIB)
        g = self._g(h)
        used = self._now(h, "mem_used_mib") if self.pos[h] >= 0 else g["mem_total_mib"] - g["mem_free_mib"]
        return SimpleNamespace(total=g["mem_total_mib"] * MIB, used=used * MIB, free=(g["mem_total_mib"] - used) * MIB)

    @staticmethod
    def _on(procs, h):
        """The processes of `procs` on handle `h` (a GPU: all of them; a MIG instance: its own)."""
        gpu, inst = (h if isinstance(h, tuple) else (h, None))
        return [SimpleNamespace(pid=p[1], usedGpuMemory=p[2] * MIB) for p in procs
                if p[0] == gpu and (inst is None or (len(p) > 3 and p[3] == inst))]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self.calls += 1
        return self._on(self.procs, h)

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        return self._on(self.graphics, h)

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        counts = self._g(h)["ecc_counts"]
        v = counts[min(self.ecc_reads[h], len(counts) - 1)]
        self.ecc_reads[h] += 1
        return v

    def nvmlDeviceGetEccMode(self, h):
        return (1, 1) if self._g(h)["ecc_mode"] else (0, 0)

    def nvmlDeviceGetPersistenceMode(self, h):
        return 1 if self._g(h)["persistence"] else 0

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return int(self._g(h)["power_limit_w"] * 1000)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return int(self._g(h)["default_power_limit_w"] * 1000)

    def _clock(self, h, key, kind):
        v = self._g(h)[key]["sm" if kind == 1 else "mem"]
        if v is None:
            raise NVMLError("Not Supported")
        return v

    def nvmlDeviceGetClock(self, h, kind, clock_id):
        key = {1: "app_clocks", 2: "default_app_clocks"}.get(clock_id)
        if key is None:
            raise NVMLError("Not Supported")
        return self._clock(h, key, kind)

    def nvmlDeviceGetApplicationsClock(self, h, kind):  # deprecated in nvidia-ml-py 13.x
        return self._clock(h, "app_clocks", kind)

    def nvmlDeviceGetDefaultApplicationsClock(self, h, kind):
        return self._clock(h, "default_app_clocks", kind)

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return self._clock(h, "max_clocks", kind)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._g(h)["pcie"]["gen"]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._g(h)["pcie"]["width"]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._g(h)["pcie"]["max_gen"]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._g(h)["pcie"]["max_width"]

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        return 0 if self.p2p_ok else 3

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return self.topology
