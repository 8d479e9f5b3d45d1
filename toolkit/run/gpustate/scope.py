"""Which NVIDIA GPUs a run uses: the server's layout over CUDA's visible devices, mapped to NVML.

`layout_positions(args)` (pure): the CUDA device ordinals sglang 0.5.23 puts its ranks on, read from
ServerArgs fields (/server_info, the static check) or recipe flags: per DP rank (without DP attention)
a block of tp x pp GPUs, rank t of stage p at base_gpu_id + block + p * tp + t * gpu_id_step (one node).
`resolve(nv, visible, order, positions)` maps CUDA_VISIBLE_DEVICES to NVML devices and keeps the
positions used. Entries are read as CUDA reads them, in order, stopping at the first one that names
no GPU: a UUID (prefix, "GPU-..."), a MIG instance ("MIG-<uuid>", or "MIG-GPU-<uuid>/gi/ci"), or an
integer, taken as the i-th GPU by PCI bus id. That is CUDA's order with CUDA_DEVICE_ORDER=PCI_BUS_ID;
its default, FASTEST_FIRST, agrees on a box of one GPU model and may not otherwise (a note says so).
NVML's own index is never taken for CUDA's: NVML documents that the two need not agree. A MIG
instance is sampled through its parent GPU (clocks, power and temperature are the whole GPU's,
shared with its other instances) and its processes through the instance. Effects: NVML queries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from toolkit.run.parallel_layout import layout


def layout_positions(args: Mapping) -> list[int]:
    """The CUDA ordinals (within the visible devices) the server's ranks use on one node (sorted)."""
    lay = layout(args)
    tp, pp, step, nnodes = lay["tp_size"], lay["pp_size"], lay["gpu_id_step"], lay["nnodes"]
    pp_here = max(pp // nnodes, 1)
    tp_here = max(tp // max(nnodes // pp, 1), 1)
    blocks = 1 if lay["dp_attention"] else lay["dp_size"]
    out = {lay["base_gpu_id"] + d * tp * pp * step + p * tp_here + t * step
           for d in range(blocks) for p in range(pp_here) for t in range(tp_here)}
    return sorted(out)


def describe_layout(args: Mapping) -> str:
    lay = layout(args)
    parts = [f"tp {lay['tp_size']}"]
    if lay["attn_dp_size"] > 1:
        parts.append(f"attention DP {lay['attn_dp_size']} (within tp)")
    elif lay["dp_size"] > 1 and not lay["dp_attention"]:
        parts.append(f"dp {lay['dp_size']}")
    if lay["pp_size"] > 1:
        parts.append(f"pp {lay['pp_size']}")
    parts.append(f"from base-gpu-id {lay['base_gpu_id']}")
    if lay["gpu_id_step"] > 1:
        parts.append(f"step {lay['gpu_id_step']}")
    return " ".join(parts)


@dataclass
class Device:
    """One CUDA device of the run: its CUDA ordinal and the NVML GPU it is (or is a MIG instance of)."""

    cuda: int
    index: int  # NVML index of the physical GPU
    handle: Any
    uuid: str
    bus_id: str | None
    by: str  # how the entry was matched: "uuid", "pci bus order", "nvml order", "mig"
    mig_uuid: str | None = None
    mig_handle: Any = None

    def to_dict(self) -> dict:
        return {"cuda": self.cuda, "index": self.index, "uuid": self.uuid, "bus_id": self.bus_id, "by": self.by,
                **({"mig": self.mig_uuid} if self.mig_uuid else {})}


@dataclass
class Scope:
    visible: str | None  # CUDA_VISIBLE_DEVICES as given (None: unset)
    devices: list[Device] = field(default_factory=list)  # the run's, in CUDA order
    visible_count: int = 0
    unmatched: list[str] = field(default_factory=list)  # entries CUDA stops at (and those after)
    missing: list[int] = field(default_factory=list)  # layout positions beyond the visible devices
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"cuda_visible_devices": self.visible, "visible_count": self.visible_count,
                "devices": [d.to_dict() for d in self.devices], "unmatched": self.unmatched,
                "missing_positions": self.missing, "notes": self.notes}


def _physical(nv) -> list[dict]:
    out = []
    for i in range(nv.count()):
        h = nv.handle(i)
        if h is not None:
            out.append({"index": i, "handle": h, "uuid": nv.uuid(h), "bus_id": nv.bus_id(h),
                        "name": nv.call("nvmlDeviceGetName", h)})
    return out


def _by_uuid(gpus: list[dict], ref: str) -> dict | None:
    ref = ref if ref.startswith("GPU-") else "GPU-" + ref
    hits = [g for g in gpus if g["uuid"] and g["uuid"].startswith(ref)]
    return hits[0] if len(hits) == 1 else None


def _mig(nv, gpus: list[dict], ref: str) -> tuple[dict, str, Any] | None:
    """(parent GPU, MIG UUID, MIG handle) of a MIG-... entry."""
    if ref.startswith("MIG-GPU-"):  # the pre-R470 form: MIG-GPU-<parent uuid>/<gi>/<ci>
        parent = _by_uuid(gpus, ref[len("MIG-"):].split("/")[0])
        return (parent, ref, None) if parent else None
    for g in gpus:
        for uuid, mh in nv.mig_instances(g["handle"]):
            if uuid and uuid.startswith(ref):
                return g, uuid, mh
    return None


def resolve(nv, visible: str | None, *, order: str | None = None, positions: list[int] | None = None) -> Scope:
    """The run's devices (see the module doc); `positions` None: every visible device."""
    gpus = _physical(nv)
    by_bus = all(g["bus_id"] for g in gpus)
    cuda_order = sorted(gpus, key=lambda g: g["bus_id"]) if by_bus else list(gpus)
    scope = Scope(visible)
    entries = [e.strip() for e in visible.split(",")] if visible is not None else None
    seen: list[Device] = []
    if entries is None:
        seen = [Device(n, g["index"], g["handle"], g["uuid"], g["bus_id"], "pci bus order" if by_bus else "nvml order")
                for n, g in enumerate(cuda_order)]
    else:
        for n, entry in enumerate(entries):
            dev = None
            if entry.lstrip("-").isdigit():
                k = int(entry)
                if 0 <= k < len(cuda_order):
                    g = cuda_order[k]
                    dev = Device(len(seen), g["index"], g["handle"], g["uuid"], g["bus_id"],
                                 "pci bus order" if by_bus else "nvml order")
                    if nv.mig_instances(g["handle"]):
                        scope.notes.append(f"GPU {g['index']} has MIG instances: CUDA device {entry} may be one of "
                                           "them, sampled here as the whole GPU; name it by its MIG-UUID")
            elif entry.startswith("MIG-"):
                hit = _mig(nv, gpus, entry)
                if hit:
                    g, mig_uuid, mh = hit
                    dev = Device(len(seen), g["index"], g["handle"], g["uuid"], g["bus_id"], "mig", mig_uuid, mh)
                    scope.notes.append(f"CUDA device {len(seen)} is MIG instance {mig_uuid} of GPU {g['index']}: "
                                       "its clocks, power and temperature are the whole GPU's, shared with the "
                                       "GPU's other instances")
            elif entry:
                g = _by_uuid(gpus, entry)
                if g:
                    dev = Device(len(seen), g["index"], g["handle"], g["uuid"], g["bus_id"], "uuid")
            if dev is None or any(d.index == dev.index and d.mig_uuid == dev.mig_uuid for d in seen):
                scope.unmatched = entries[n:]
                break
            seen.append(dev)
    if not by_bus and any(d.by == "nvml order" for d in seen):
        scope.notes.append("NVML gave no PCI bus id: integer CUDA devices taken in NVML's order, which CUDA need not share")
    names = {g["name"] for g in gpus}
    if any(d.by in ("pci bus order", "nvml order") for d in seen) and len(names) > 1 \
            and (order or "FASTEST_FIRST") != "PCI_BUS_ID":
        scope.notes.append(f"CUDA_DEVICE_ORDER is {order or 'unset (FASTEST_FIRST)'} and the GPUs differ "
                           f"({', '.join(sorted(map(str, names)))}): CUDA may number them otherwise than by PCI bus "
                           "id, which patchbench assumes; set CUDA_DEVICE_ORDER=PCI_BUS_ID or name GPUs by UUID")
    scope.visible_count = len(seen)
    want = positions if positions is not None else list(range(len(seen)))
    scope.devices = [seen[p] for p in want if 0 <= p < len(seen)]
    scope.missing = [p for p in want if not 0 <= p < len(seen)]
    return scope


def why_empty(scope: Scope) -> str:
    """One line: why a scope holds no device (or does not hold the whole layout)."""
    if scope.visible is not None and scope.visible_count == 0:
        return f"CUDA_VISIBLE_DEVICES={scope.visible} matches no NVIDIA GPU"
    text = []
    if scope.unmatched:
        text.append(f"CUDA_VISIBLE_DEVICES entries {','.join(scope.unmatched)} match no NVIDIA GPU (CUDA stops there)")
    if scope.missing:
        text.append(f"the layout uses CUDA device(s) {','.join(map(str, scope.missing))} but {scope.visible_count} "
                    "are visible")
    return "; ".join(text)
