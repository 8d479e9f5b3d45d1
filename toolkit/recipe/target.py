"""A recipe's `[target]` as the facts a device reports: what the static check presents to sglang.

The GPU row comes from toolkit/data/gpus.toml (the roofline's table, read through its loader);
`compute_capability` and `device_memory_mib` are the device's own answers (torch.cuda
capability; nvidia-smi memory.total), not the datasheet's GB.
"""

from __future__ import annotations

import tomllib

from toolkit.errors import BadInput
from toolkit.roofline import GPUS_FILE, get_gpu
from toolkit.recipe.spec import TargetSpec


def target_facts(target: TargetSpec) -> dict:
    """{"key", "name", "capability": [major, minor], "memory_mib", "memory_gb", "count"}."""
    gpu = get_gpu(target.gpu)  # BadInput with the known names when unknown
    with open(GPUS_FILE, "rb") as fh:
        row = tomllib.load(fh)[gpu.key]
    cc = row.get("compute_capability") or _capability_of_arch(gpu.arch)
    if not cc:
        raise BadInput(f"toolkit/data/gpus.toml: `{gpu.key}` has no compute_capability",
                       hint='add compute_capability = "MAJOR.MINOR" to its row')
    major, _, minor = str(cc).partition(".")
    memory_mib = int(row.get("device_memory_mib") or gpu.memory_gb * 1e9 / (1 << 20))
    return {"key": gpu.key, "name": gpu.name, "capability": [int(major), int(minor or 0)],
            "memory_mib": memory_mib, "memory_gb": gpu.memory_gb, "count": target.count}


def _capability_of_arch(arch: str) -> str | None:
    """"SM120" -> "12.0", "SM90" -> "9.0"."""
    digits = arch.upper().removeprefix("SM")
    if not digits.isdigit() or len(digits) < 2:
        return None
    return f"{digits[:-1]}.{digits[-1]}"
