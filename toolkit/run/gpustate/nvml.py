"""The one module that talks to NVML (`nvidia-ml-py`, imported as `pynvml`).

`open_nvml(module)` initialises NVML and returns an `Nvml` session, or None with the reason there
is no GPU state (the package missing, no driver, no NVIDIA GPU). Every NVML call goes through
`Nvml.call`, which turns an NVML error (a query the GPU does not support) into None, so a reading
has None fields, never invented zeros. `module` is the `pynvml` module, or a test double with the
same functions (tests feed it recorded series). Effects: NVML init/shutdown, read-only queries.
"""

from __future__ import annotations

import importlib
from typing import Any

# NVML constants (fixed by the NVML ABI; a test double need not define them).
CLOCK_SM, CLOCK_MEM = 1, 2
TEMPERATURE_GPU = 0
MEMORY_ERROR_UNCORRECTED = 1
VOLATILE_ECC = 0
P2P_CAPS_READ = 0
P2P_STATUS_OK = 0
TOPOLOGY = {0: "INTERNAL", 10: "SINGLE", 20: "MULTIPLE", 30: "HOSTBRIDGE", 40: "NODE", 50: "SYSTEM"}

# Clock-event (throttle) reason bits of nvmlDeviceGetCurrentClocksEventReasons.
REASONS = {0x1: "idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
           0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks"}
POWER_BITS = 0x4 | 0x80
THERMAL_BITS = 0x20 | 0x40
THROTTLE_BITS = POWER_BITS | THERMAL_BITS | 0x8  # what slows a busy GPU down (not idle or settings)


def decode_reasons(mask: int | None) -> list[str]:
    """The names of the bits set in a clock-event reason mask."""
    if not mask:
        return []
    return [name for bit, name in REASONS.items() if mask & bit]


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


class Nvml:
    """An initialised NVML session over `module` (pynvml or a double)."""

    def __init__(self, module: Any):
        self.m = module

    def call(self, name: str, *args: Any) -> Any:
        """module.name(*args), or None when the function is absent or NVML refuses the query."""
        fn = getattr(self.m, name, None)
        if fn is None:
            return None
        try:
            return _text(fn(*args))
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported and friends: "unknown", not zero
            return None

    def count(self) -> int:
        return int(self.call("nvmlDeviceGetCount") or 0)

    def handle(self, index: int) -> Any:
        return self.call("nvmlDeviceGetHandleByIndex", index)

    def handle_of(self, ref: str) -> tuple[int, Any] | None:
        """(index, handle) of a CUDA_VISIBLE_DEVICES entry: an index or a UUID (prefix)."""
        if ref.isdigit():
            h = self.handle(int(ref))
            return (int(ref), h) if h is not None else None
        for i in range(self.count()):
            h = self.handle(i)
            uuid = str(self.call("nvmlDeviceGetUUID", h) or "")
            if uuid and uuid.startswith(ref):
                return i, h
        return None

    def driver(self) -> dict:
        cuda = self.call("nvmlSystemGetCudaDriverVersion")
        return {"driver": self.call("nvmlSystemGetDriverVersion"),
                "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) and cuda else None}

    def tick(self, h: Any) -> dict:
        """One reading of a busy GPU: clocks (MHz), power (W), temperature (C), reasons, use."""
        power = self.call("nvmlDeviceGetPowerUsage", h)
        reasons = self.call("nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None:
            reasons = self.call("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        util = self.call("nvmlDeviceGetUtilizationRates", h)
        mem = self.call("nvmlDeviceGetMemoryInfo", h)
        return {"sm_mhz": self.call("nvmlDeviceGetClockInfo", h, CLOCK_SM),
                "mem_mhz": self.call("nvmlDeviceGetClockInfo", h, CLOCK_MEM),
                "power_w": None if power is None else round(power / 1000.0, 1),
                "temp_c": self.call("nvmlDeviceGetTemperature", h, TEMPERATURE_GPU),
                "reasons": reasons,
                "util_pct": getattr(util, "gpu", None),
                "mem_used_mib": None if mem is None else round(mem.used / 2**20)}

    def link(self, h: Any) -> dict:
        """PCIe link now and at most (the current one drops at idle: read it under load)."""
        return {"gen": self.call("nvmlDeviceGetCurrPcieLinkGeneration", h),
                "width": self.call("nvmlDeviceGetCurrPcieLinkWidth", h),
                "max_gen": self.call("nvmlDeviceGetMaxPcieLinkGeneration", h),
                "max_width": self.call("nvmlDeviceGetMaxPcieLinkWidth", h)}

    def ecc_uncorrected(self, h: Any) -> int | None:
        return self.call("nvmlDeviceGetTotalEccErrors", h, MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC)

    def processes(self, h: Any) -> list[dict]:
        """Compute and graphics processes on a GPU: pid and memory used (MiB, when known)."""
        out = {}
        for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            for p in self.call(name, h) or []:
                used = getattr(p, "usedGpuMemory", None)
                out[int(p.pid)] = {"pid": int(p.pid), "used_mib": round(used / 2**20) if isinstance(used, int) else None}
        return list(out.values())

    def device(self, index: int, h: Any) -> dict:
        """What a GPU is and how it is set: name, UUID, power limits, persistence, ECC, clocks."""
        limit = self.call("nvmlDeviceGetEnforcedPowerLimit", h)
        default = self.call("nvmlDeviceGetPowerManagementDefaultLimit", h)
        ecc = self.call("nvmlDeviceGetEccMode", h)
        mem = self.call("nvmlDeviceGetMemoryInfo", h)
        persistence = self.call("nvmlDeviceGetPersistenceMode", h)
        return {"index": index, "name": self.call("nvmlDeviceGetName", h), "uuid": self.call("nvmlDeviceGetUUID", h),
                "power_limit_w": None if limit is None else round(limit / 1000.0, 1),
                "default_power_limit_w": None if default is None else round(default / 1000.0, 1),
                "persistence": None if persistence is None else bool(persistence),
                "ecc_mode": None if ecc is None else bool(ecc[0] if isinstance(ecc, (list, tuple)) else ecc),
                "ecc_uncorrected": self.ecc_uncorrected(h),
                "app_clocks": {"sm": self.call("nvmlDeviceGetApplicationsClock", h, CLOCK_SM),
                               "mem": self.call("nvmlDeviceGetApplicationsClock", h, CLOCK_MEM)},
                "default_app_clocks": {"sm": self.call("nvmlDeviceGetDefaultApplicationsClock", h, CLOCK_SM),
                                       "mem": self.call("nvmlDeviceGetDefaultApplicationsClock", h, CLOCK_MEM)},
                "max_clocks": {"sm": self.call("nvmlDeviceGetMaxClockInfo", h, CLOCK_SM),
                               "mem": self.call("nvmlDeviceGetMaxClockInfo", h, CLOCK_MEM)},
                "mem_total_mib": None if mem is None else round(mem.total / 2**20),
                "mem_free_mib": None if mem is None else round(mem.free / 2**20),
                "pcie": self.link(h)}

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
