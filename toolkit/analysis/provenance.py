"""Whole-env provenance: what else differed between two runs' envs (pure; no I/O).

A run records its env at launch (`toolkit.envs.manifest.env_record`, stored in the run's extra): the full installed
package set (the env manifest's `uv pip freeze`), the CUDA toolchain it was built with, the build
arch, and the server config sglang resolved statically for the target. `env_differences` lists
every installed distribution whose version differs, then the toolchain, arch and resolved config,
ordered by likely impact on a measurement: sglang, sglang-kernel, flashinfer*, torch, triton, nccl,
transformers first, then the CUDA libraries, then the rest by name.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping

# Most likely to move a number first. Names are PEP 503 normalised.
IMPACT = ("sglang", "sglang-kernel", "sgl-kernel", "flashinfer*", "torch", "triton", "*nccl*", "transformers",
          "nvidia-*", "cuda-*", "deep-gemm", "xgrammar", "torchao")
_FREEZE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?:==\s*(\S+)|@\s*(\S+))")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_freeze(lines: Iterable[str]) -> dict[str, str]:
    """`name==version` / `name @ url` lines -> {normalised name: version or url}."""
    out = {}
    for line in lines or ():
        m = _FREEZE.match(str(line))
        if m:
            out[normalise(m.group(1))] = m.group(2) or m.group(3)
    return out


def impact_rank(name: str) -> tuple[int, str]:
    for i, pattern in enumerate(IMPACT):
        if fnmatch.fnmatchcase(name, pattern):
            return i, name
    return len(IMPACT), name


def package_changes(a: Iterable[str], b: Iterable[str]) -> list[tuple[str, str | None, str | None]]:
    """(name, version in a, version in b) for every distribution that differs, by impact."""
    pa, pb = parse_freeze(a), parse_freeze(b)
    names = [n for n in set(pa) | set(pb) if pa.get(n) != pb.get(n)]
    return [(n, pa.get(n), pb.get(n)) for n in sorted(names, key=impact_rank)]


def _v(value) -> str:
    return "(absent)" if value is None else str(value)


def env_differences(a: Mapping | None, b: Mapping | None, *, resolved_keys: Iterable[str] = ()) -> list[str]:
    """One line per difference between two env records (a -> b), by likely impact. Empty records
    (runs stored before envs were recorded) say so instead of claiming no difference."""
    has_a, has_b = bool(a and a.get("packages")), bool(b and b.get("packages"))
    if not (has_a and has_b):
        return [] if not (has_a or has_b) else [
            "installed packages: recorded for one run only (the other was imported or stored before envs were recorded)"]
    out = [f"package {n}: {_v(va)} -> {_v(vb)}" for n, va, vb in package_changes(a["packages"], b["packages"])]
    ta, tb = a.get("cuda_toolchain") or {}, b.get("cuda_toolchain") or {}
    for key in sorted(set(ta) | set(tb)):
        if ta.get(key) != tb.get(key):
            out.append(f"CUDA toolchain {key}: {_v(ta.get(key))} -> {_v(tb.get(key))}")
    if list(a.get("arch") or []) != list(b.get("arch") or []):
        out.append(f"build arch: {' '.join(a.get('arch') or []) or '(none)'} -> {' '.join(b.get('arch') or []) or '(none)'}")
    ra, rb = a.get("resolved_config") or {}, b.get("resolved_config") or {}
    for key in resolved_keys:
        if key in ra or key in rb:
            if str(ra.get(key)) != str(rb.get(key)):
                out.append(f"resolved {key}: {_v(ra.get(key))} -> {_v(rb.get(key))}")
    return out


def run_env_differences(run_a, run_b) -> list[str]:
    """`env_differences` of two stored runs (their `extra["env"]`, written at launch), then what
    differed on the box during their benchmarks (GPU edition, driver, power limit, persistence,
    clocks: `extra["gpu_state"]`)."""
    from toolkit.run.sglang_args import KEY_FIELDS  # the resolved fields worth comparing

    from toolkit.results.box_flags import differences, state_of  # the box: edition, limits, clocks, driver

    from toolkit.run.launch_env import inherited_differences  # what the calling shell handed the server

    return (env_differences((run_a.extra or {}).get("env"), (run_b.extra or {}).get("env"), resolved_keys=KEY_FIELDS)
            + inherited_differences((run_a.extra or {}).get("launch_env"), (run_b.extra or {}).get("launch_env"))
            + differences(state_of(run_a), state_of(run_b)))
