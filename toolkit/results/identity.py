"""The run identity: what makes two runs the same experiment (pure).

Two runs are the same experiment when every one of these is the same:

    env_key       trees, build settings, toolchain, dependencies (toolkit.envs.identity)
    server_argv   the effective server arguments (after ${VAR} expansion), flags in a normal order,
                  without --host/--port (where a server listens does not change what it computes)
    server_env    the recipe's [server.env] given to the server
    model         the model path, and `model_config` the sha256 of its config.json where readable
    target        the recipe's [target] (the GPU facts presented to sglang's resolution)
    bench_key     the benchmark (driver and every parameter that changes what is measured)
    gpu_key       the GPUs it ran on

`components_of(row)` reads them from a stored run (a RunRow or its dict); `identity_key` hashes
them. A run whose stored fields lack the benchmark key has the identity UNKNOWN and is never reused
or pooled. The first six without `env_key`/`gpu_key` are the recipe's *definition*: what
the recipe file says now can be compared with what a stored run was (`definition_differences`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

UNKNOWN = "unknown"
IDENTITY_VERSION = 1
FIELDS = ("env_key", "server_argv", "server_env", "model", "model_config", "target", "bench_key", "gpu_key")
DEFINITION_FIELDS = ("server_argv", "server_env", "model", "target", "bench_key")
_LAUNCHER = ("-m", "sglang.launch_server")
_WHERE = ("--host", "--port")


def normal_argv(argv: list | tuple | None) -> list[list[str]]:
    """Server argv as [flag, value...] groups sorted by flag: `--b 1 --a` and `--a --b 1` are one
    configuration. The launcher prefix and --host/--port are dropped; the model path is kept."""
    items = [str(a) for a in (argv or ())]
    if tuple(items[:2]) == _LAUNCHER:
        items = items[2:]
    groups: list[list[str]] = []
    for item in items:
        if item.startswith("--") or not groups:
            flag, eq, value = item.partition("=")
            groups.append([flag, value] if eq and flag.startswith("--") else [item])
        else:
            groups[-1].append(item)
    return sorted((g for g in groups if g[0] not in _WHERE), key=lambda g: g[0])


def components_of(row: Any) -> dict | None:
    """The identity components of a stored run (RunRow or dict); None when the stored fields do
    not allow it (no benchmark key: an identity that cannot be known). A run stored without an env
    key (imported from sglang's JSONL) has None there, as every such run."""
    get = row.get if isinstance(row, Mapping) else (lambda k, d=None: getattr(row, k, d))
    env_key, bench = get("env_key"), get("bench_key")
    if not bench:
        return None
    resolved = get("recipe_resolved") or {}
    server = resolved.get("server") or {}
    extra = get("extra") or {}
    return {
        "env_key": env_key,
        "server_argv": normal_argv(get("server_argv")),
        "server_env": dict(sorted((get("env_vars") or {}).items())),
        "model": server.get("model"),
        "model_config": extra.get("model_config_sha256"),
        "target": resolved.get("target") or None,
        "bench_key": bench,
        "gpu_key": get("gpu_key") or "none",
    }


def identity_key(components: Mapping | None) -> str:
    """sha256 (hex, 32 characters) of the canonical JSON of the components; UNKNOWN for None."""
    if components is None:
        return UNKNOWN
    doc = json.dumps({"v": IDENTITY_VERSION, **{k: components.get(k) for k in FIELDS}}, sort_keys=True,
                     separators=(",", ":"), default=str)
    return hashlib.sha256(doc.encode()).hexdigest()[:32]


def identity_of(row: Any) -> str:
    return identity_key(components_of(row))


def _flag_map(groups: list) -> dict[str, str]:
    return {g[0]: " ".join(g[1:]) if len(g) > 1 else "true" for g in groups}


def differences(a: Mapping | None, b: Mapping | None, fields: tuple[str, ...] = FIELDS,
                bench_text: str | None = None) -> list[str]:
    """What differs from components `a` to `b`, one short phrase each ("server arg
    moe-runner-backend: auto -> flashinfer_cutlass"). `bench_text` describes a benchmark change."""
    if a is None or b is None:
        return ["identity unknown (stored before run identities)"]
    out: list[str] = []
    for f in fields:
        va, vb = a.get(f), b.get(f)
        if va == vb:
            continue
        if f == "server_argv":
            fa, fb = _flag_map(va or []), _flag_map(vb or [])
            for flag in sorted(set(fa) | set(fb)):
                if fa.get(flag) != fb.get(flag):
                    out.append(f"server arg {flag.lstrip('-')}: {fa.get(flag, '(unset)')} -> {fb.get(flag, '(unset)')}")
        elif f == "server_env":
            ea, eb = va or {}, vb or {}
            for k in sorted(set(ea) | set(eb)):
                if ea.get(k) != eb.get(k):
                    out.append(f"server env {k}: {ea.get(k, '(unset)')} -> {eb.get(k, '(unset)')}")
        elif f == "bench_key":
            out.append(f"[benchmark]: {bench_text}" if bench_text else "[benchmark] changed")
        elif f in ("env_key", "model_config"):
            out.append(f"{f.replace('_', ' ')}: {str(va)[:10]} -> {str(vb)[:10]}")
        else:
            out.append(f"{f.replace('_', ' ')}: {va} -> {vb}")
    return out


def definition_differences(stored: Mapping | None, current: Mapping, bench_text: str | None = None) -> list[str]:
    """What the recipe file (`current`, from `toolkit.run.identity.recipe_definition`) changed
    since a stored run (`stored`, its components): [] when the run is of the recipe as it is now."""
    return differences(stored, current, DEFINITION_FIELDS, bench_text)
