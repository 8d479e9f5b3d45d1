"""The one module that talks to NVML (`nvidia-ml-py`, imported as `pynvml`).

`open_nvml(module)` initialises NVML and returns an `Nvml` session, or None with the reason there
is no GPU state (the package missing, no driver, no NVIDIA GPU). `Nvml.read(what, h)` takes a reading
from the first getter of `GETTERS[what]` that the binding has: a deprecated getter only when its
successor is absent, and which one answered is kept (`Nvml.used`). A getter that is absent or that
NVML refuses (a query the GPU does not support) gives None and the reason (`Nvml.why`), never an
invented zero. `module` is the `pynvml` module, or a test double with the same functions.
Locked clocks (`nvidia-smi -lgc` / `-lmc`): nvidia-ml-py 13.615 has only their setters and resetters
(nvmlDeviceSet/ResetGpuLockedClocks, ...), no getter, so they cannot be read (LOCKED_CLOCKS_UNREADABLE).
Effects: NVML init/shutdown, read-only queries.
"""

from __future__ import annotations

import importlib
from typing import Any

# NVML constants (fixed by the NVML ABI; a test double need not define them).
CLOCK_SM, CLOCK_MEM = 1, 2
CLOCK_ID_APP_TARGET, CLOCK_ID_APP_DEFAULT = 1, 2
TEMPERATURE_GPU = 0
MEMORY_ERROR_UNCORRECTED = 1
VOLATILE_ECC = 0
P2P_CAPS_READ = 0
P2P_STATUS_OK = 0
TOPOLOGY = {0: "INTERNAL", 10: "SINGLE", 20: "MULTIPLE", 30: "HOSTBRIDGE", 40: "NODE", 50: "SYSTEM"}

# Clock-event (throttle) reason bits of nvmlDeviceGetCurrentClocksEventReasons. 0x2 is NVML's
# "applications clocks setting" (formerly "user defined clocks"): clocks held by a clock setting.
REASONS = {0x1: "idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
           0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks"}
POWER_BITS = 0x4 | 0x80
THERMAL_BITS = 0x20 | 0x40
THROTTLE_BITS = POWER_BITS | THERMAL_BITS | 0x8  # what slows a busy GPU down (not idle or settings)
CLOCK_SETTING_BIT = 0x2

# reading -> getters in order of preference: (function, extra args). The later ones are the
# deprecated forms (nvidia-ml-py 13.615: "will be removed in CUDA 14.0"), used only when the earlier
# is not in the binding at all, or the binding has it and the driver's libnvidia-ml does not
# (NVML_ERROR_FUNCTION_NOT_FOUND at call time: nvmlDeviceGetTemperatureV arrived with driver R565,
# nvmlDeviceGetCurrentClocksEventReasons with R535; an R550 box has only the older temperature getter).
GETTERS: dict[str, tuple[tuple[str, tuple], ...]] = {
    "temp_c": (("nvmlDeviceGetTemperatureV", (TEMPERATURE_GPU,)), ("nvmlDeviceGetTemperature", (TEMPERATURE_GPU,))),
    "reasons": (("nvmlDeviceGetCurrentClocksEventReasons", ()), ("nvmlDeviceGetCurrentClocksThrottleReasons", ())),
    "app_sm": (("nvmlDeviceGetClock", (CLOCK_SM, CLOCK_ID_APP_TARGET)), ("nvmlDeviceGetApplicationsClock", (CLOCK_SM,))),
    "app_mem": (("nvmlDeviceGetClock", (CLOCK_MEM, CLOCK_ID_APP_TARGET)), ("nvmlDeviceGetApplicationsClock", (CLOCK_MEM,))),
    "default_app_sm": (("nvmlDeviceGetClock", (CLOCK_SM, CLOCK_ID_APP_DEFAULT)),
                       ("nvmlDeviceGetDefaultApplicationsClock", (CLOCK_SM,))),
    "default_app_mem": (("nvmlDeviceGetClock", (CLOCK_MEM, CLOCK_ID_APP_DEFAULT)),
                        ("nvmlDeviceGetDefaultApplicationsClock", (CLOCK_MEM,))),
    "sm_mhz": (("nvmlDeviceGetClockInfo", (CLOCK_SM,)),),
    "mem_mhz": (("nvmlDeviceGetClockInfo", (CLOCK_MEM,)),),
    "power_mw": (("nvmlDeviceGetPowerUsage", ()),),
    "util": (("nvmlDeviceGetUtilizationRates", ()),),
    "mem": (("nvmlDeviceGetMemoryInfo", ()),),
}
FUNCTION_NOT_FOUND = 13  # NVML_ERROR_FUNCTION_NOT_FOUND: the driver's library lacks the symbol
LOCKED_CLOCKS_UNREADABLE = ("NVML has no getter for locked clocks (nvidia-ml-py offers only nvmlDeviceSetGpuLockedClocks"
                            " / nvmlDeviceSetMemoryLockedClocks and their resets)")


def decode_reasons(mask: int | None) -> list[str]:
    """The names of the bits set in a clock-event reason mask."""
    if not mask:
        return []
    return [name for bit, name in REASONS.items() if mask & bit]


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc) or 'refused'}"


class Nvml:
    """An initialised NVML session over `module` (pynvml or a double)."""

    def __init__(self, module: Any):
        self.m = module
        self.used: dict[str, str] = {}  # reading -> the getter that answered it
        self.why: dict[str, str] = {}  # reading -> why the last read of it gave None
        self.driver_lacks: dict[str, str] = {}  # reading -> the successor getter the driver's NVML lacks

    def has(self, name: str) -> bool:
        return getattr(self.m, name, None) is not None

    def call(self, name: str, *args: Any) -> Any:
        """module.name(*args), or None when the function is absent or NVML refuses the query."""
        return self.attempt(name, *args)[0]

    def attempt(self, name: str, *args: Any) -> tuple[Any, str | None]:
        """(module.name(*args), None), or (None, why it gave nothing)."""
        value, why, _ = self._invoke(name, *args)
        return value, why

    def _invoke(self, name: str, *args: Any) -> tuple[Any, str | None, bool]:
        """attempt's (value, why) and whether the function is missing (from the binding, or from the
        driver's library: NVML_ERROR_FUNCTION_NOT_FOUND)."""
        fn = getattr(self.m, name, None)
        if fn is None:
            return None, f"{name} is not in this nvidia-ml-py", True
        try:
            return _text(fn(*args)), None, False
        except Exception as exc:  # noqa: BLE001 - NVMLError_NotSupported and friends: "unknown", said
            return None, f"{name}: {_error(exc)}", getattr(exc, "value", None) == FUNCTION_NOT_FOUND

    def read(self, what: str, h: Any) -> Any:
        """The reading `what` of GPU `h` from the first getter the binding and the driver have (see
        GETTERS): a getter the driver's library lacks falls through to the next one."""
        missing = []
        for name, args in GETTERS[what]:
            if not self.has(name):
                continue
            value, why, gone = self._invoke(name, h, *args)
            if gone:
                missing.append(why)
                self.driver_lacks.setdefault(what, name)
                continue
            self.used[what] = name
            if why is None:
                self.why.pop(what, None)
            else:
                self.why[what] = why
            return value
        self.why[what] = "; ".join(missing) if missing else \
            "no getter in this nvidia-ml-py (" + ", ".join(n for n, _ in GETTERS[what]) + ")"
        return None

    def count(self) -> int:
        return int(self.call("nvmlDeviceGetCount") or 0)

    def handle(self, index: int) -> Any:
        return self.call("nvmlDeviceGetHandleByIndex", index)

    def uuid(self, h: Any) -> str:
        return str(self.call("nvmlDeviceGetUUID", h) or "")

    def bus_id(self, h: Any) -> str | None:
        """The GPU's PCI bus id ("00000000:3B:00.0", lower case), None when NVML does not say."""
        info = self.call("nvmlDeviceGetPciInfo", h)
        bus = _text(getattr(info, "busId", None)) if info is not None else None
        return str(bus).lower() if bus else None

    def mig_instances(self, h: Any) -> list[tuple[str, Any]]:
        """(MIG UUID, MIG handle) of each MIG instance on a physical GPU (none without MIG)."""
        n = self.call("nvmlDeviceGetMaxMigDeviceCount", h) or 0
        out = []
        for j in range(int(n)):
            mh = self.call("nvmlDeviceGetMigDeviceHandleByIndex", h, j)
            if mh is not None:
                out.append((self.uuid(mh), mh))
        return out

    def driver(self) -> dict:
        cuda = self.call("nvmlSystemGetCudaDriverVersion")
        return {"driver": self.call("nvmlSystemGetDriverVersion"),
                "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) and cuda else None}

    def tick(self, h: Any) -> dict:
        """One reading of a busy GPU: clocks (MHz), power (W), temperature (C), reasons, use; plus
        "unread": {field: why} for the fields that came back None."""
        self.why = {}
        power = self.read("power_mw", h)
        util, mem = self.read("util", h), self.read("mem", h)
        out = {"sm_mhz": self.read("sm_mhz", h), "mem_mhz": self.read("mem_mhz", h),
               "power_w": None if power is None else round(power / 1000.0, 1),
               "temp_c": self.read("temp_c", h), "reasons": self.read("reasons", h),
               "util_pct": getattr(util, "gpu", None), "mem_used_mib": None if mem is None else round(mem.used / 2**20)}
        names = {"power_w": "power_mw", "util_pct": "util", "mem_used_mib": "mem"}
        out["unread"] = {f: self.why[names.get(f, f)] for f in out if names.get(f, f) in self.why}
        return out

    def link(self, h: Any) -> dict:
        """PCIe link now and at most (the current one drops at idle: read it under load)."""
        return {"gen": self.call("nvmlDeviceGetCurrPcieLinkGeneration", h),
                "width": self.call("nvmlDeviceGetCurrPcieLinkWidth", h),
                "max_gen": self.call("nvmlDeviceGetMaxPcieLinkGeneration", h),
                "max_width": self.call("nvmlDeviceGetMaxPcieLinkWidth", h)}

    def ecc_uncorrected(self, h: Any) -> int | None:
        return self.call("nvmlDeviceGetTotalEccErrors", h, MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC)

    def processes(self, h: Any) -> tuple[list[dict], list[str]]:
        """Processes on a GPU: pid, memory used (MiB, when known) and kind: "compute" (CUDA, MPS) or
        "graphics" (a display server, a GL app; a pid in both lists is compute); and why a list
        could not be read (NoPermission, NotSupported, a binding/driver mismatch): a list NVML
        refused is not an empty one."""
        out: dict[int, dict] = {}
        refused = []
        for name, kind in (("nvmlDeviceGetComputeRunningProcesses", "compute"),
                           ("nvmlDeviceGetMPSComputeRunningProcesses", "compute"),
                           ("nvmlDeviceGetGraphicsRunningProcesses", "graphics")):
            listed, why = self.attempt(name, h)
            if why is not None and name != "nvmlDeviceGetMPSComputeRunningProcesses":  # MPS: often not supported
                refused.append(why)
            for p in listed or []:
                pid = int(p.pid)
                if pid in out:
                    continue
                used = getattr(p, "usedGpuMemory", None)
                out[pid] = {"pid": pid, "used_mib": round(used / 2**20) if isinstance(used, int) else None, "kind": kind}
        return list(out.values()), refused

    def device(self, index: int, h: Any) -> dict:
        """What a GPU is and how it is set: name, UUID, PCI bus id, power limits, persistence, ECC,
        clocks set; "getters" (reading -> the function that answered) and "unread" (reading -> why not)."""
        limit = self.call("nvmlDeviceGetEnforcedPowerLimit", h)
        default = self.call("nvmlDeviceGetPowerManagementDefaultLimit", h)
        ecc = self.call("nvmlDeviceGetEccMode", h)
        self.why = {}
        mem = self.read("mem", h)
        persistence = self.call("nvmlDeviceGetPersistenceMode", h)
        clocks = {k: self.read(k, h) for k in ("app_sm", "app_mem", "default_app_sm", "default_app_mem")}
        reasons = self.read("reasons", h)
        unread = dict(self.why)
        unread["locked_clocks"] = LOCKED_CLOCKS_UNREADABLE
        return {"index": index, "name": self.call("nvmlDeviceGetName", h), "uuid": self.call("nvmlDeviceGetUUID", h),
                "bus_id": self.bus_id(h),
                "power_limit_w": None if limit is None else round(limit / 1000.0, 1),
                "default_power_limit_w": None if default is None else round(default / 1000.0, 1),
                "persistence": None if persistence is None else bool(persistence),
                "ecc_mode": None if ecc is None else bool(ecc[0] if isinstance(ecc, (list, tuple)) else ecc),
                "ecc_uncorrected": self.ecc_uncorrected(h),
                "app_clocks": {"sm": clocks["app_sm"], "mem": clocks["app_mem"]},
                "default_app_clocks": {"sm": clocks["default_app_sm"], "mem": clocks["default_app_mem"]},
                "max_clocks": {"sm": self.call("nvmlDeviceGetMaxClockInfo", h, CLOCK_SM),
                               "mem": self.call("nvmlDeviceGetMaxClockInfo", h, CLOCK_MEM)},
                "reasons_now": reasons,
                "mem_total_mib": None if mem is None else round(mem.total / 2**20),
                "mem_free_mib": None if mem is None else round(mem.free / 2**20),
                "pcie": self.link(h), "getters": dict(self.used), "driver_lacks": dict(self.driver_lacks),
                "unread": unread}

    def p2p(self, a: Any, b: Any) -> tuple[bool | None, str | None]:
        """(peer-to-peer reads work, common ancestor level) between two GPUs."""
        status = self.call("nvmlDeviceGetP2PStatus", a, b, P2P_CAPS_READ)
        level = self.call("nvmlDeviceGetTopologyCommonAncestor", a, b)
        return (None if status is None else status == P2P_STATUS_OK), TOPOLOGY.get(level, None if level is None else str(level))

    def close(self) -> None:
        self.call("nvmlShutdown")


def open_nvml(module: Any = None) -> tuple[Nvml | None, str]:
    """(session, "") or (None, why there is no GPU state). `module`: pynvml or a test double."""
    if module is None:
        try:
            module = importlib.import_module("pynvml")
        except ImportError:
            return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        module.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no driver, no library: no GPU state
        return None, f"NVML unavailable ({type(exc).__name__}: {str(exc) or 'no driver'})"
    nv = Nvml(module)
    if nv.count() < 1:
        nv.close()
        return None, "no NVIDIA GPU"
    return nv, ""
