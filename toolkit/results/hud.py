"""Stored runs as PyTorch HUD v3 benchmark records (`patchbench results --export hud`), for teams whose
dashboard reads the table `benchmark.oss_ci_benchmark_v3`. Pure: takes runs and samples, returns dicts.

One record per configuration, metric and point: the repeats of one configuration (the runs of one
recipe with one run identity in one group, `toolkit.results.identity`) are the record's
`metric.benchmark_values`, one value per run (the mean of that run's samples there, as every table
reduces them, `toolkit.analysis.selection.reduce`), ordered by repeat. Runs without samples, and
profile runs (measured under the profiler), make no record. The columns follow pytorch/test-infra's `clickhouse_db_schema/oss_ci_benchmark_v3/schema.sql`
(`_meta` is the replicator's, left out); the types are ClickHouse's, so every Map value is a string:

    timestamp UInt64          the newest run's end, epoch seconds (as test-infra's gather_metadata.py)
    schema_version String     "v3"
    name String               "patchbench <recipe>"
    repo String               the first source's git remote as owner/name (credentials stripped), else ""
    head_branch String        the source's rev when it is a branch or tag name, else ""
    head_sha String           the first source's git tree hash (what was measured, patches applied)
    workflow_id UInt64        the group id (a 12-hex-digit sweep/run group) as an integer, else 0
    run_attempt UInt32        1
    job_id UInt64             the first 15 hex digits of the run identity as an integer, else 0
    servicelab_experiment_id, servicelab_trial_id UInt64   0
    runners Array(Tuple(name, type, cpu_info, cpu_count UInt32, mem_info, avail_mem_in_gb UInt32,
            gpu_info, gpu_count UInt32, gpu_mem_info, avail_gpu_mem_in_gb UInt32, extra_info Map))
                              one per host of the runs: host, GPU key, CPU, GPU names and memory
    benchmark Tuple(name, mode, dtype, extra_info Map)   "patchbench <driver>", "inference", the
                              recipe's [roofline] weights or "", and the recipe, identity, env key,
                              benchmark parameters
    model Tuple(name, type, backend, origins Array(String), extra_info Map)   the served model path,
                              "llm", "sglang", the recipe's sources
    inputs Map(String, Tuple(dtype, extra_info Map))   {} (the benchmark's lengths are in benchmark)
    dependencies Map(String, Tuple(repo, branch, sha, version, extra_info Map))   sglang and
                              flashinfer: their versions and tree hashes
    metric Tuple(name, benchmark_values Array(Float32), target_value Float32, extra_info Map)
                              the metric's registry name, the per-run values, 0, and unit, point,
                              point_kind, higher_is_better, run ids, status

No server argv, environment variables or log paths are exported (they may hold secrets).
test-infra's uploader (`.github/scripts/upload_benchmark_results.py`) accepts the file as it is (a
JSON list of records); it fills a record's missing metadata from the CI job but keeps what a record
carries, so drop `workflow_id`/`job_id` from the records when the CI job's own ids should win.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from datetime import datetime
from typing import Iterable, Sequence

from toolkit.results import metrics
from toolkit.results.records import RunRow, SampleRow

SCHEMA_VERSION = "v3"

# The columns of benchmark.oss_ci_benchmark_v3 a record carries, with their ClickHouse types
# (`_meta` is filled by the replicator). Tests validate records against this table.
COLUMNS = {
    "timestamp": "UInt64", "schema_version": "String", "name": "String", "repo": "String",
    "head_branch": "String", "head_sha": "String", "workflow_id": "UInt64", "run_attempt": "UInt32",
    "job_id": "UInt64", "servicelab_experiment_id": "UInt64", "servicelab_trial_id": "UInt64",
    "runners": "Array(Tuple)", "benchmark": "Tuple", "model": "Tuple", "inputs": "Map",
    "dependencies": "Map", "metric": "Tuple",
}
TUPLES = {  # field -> type of each tuple's members
    "runners": {"name": "String", "type": "String", "cpu_info": "String", "cpu_count": "UInt32",
                "mem_info": "String", "avail_mem_in_gb": "UInt32", "gpu_info": "String", "gpu_count": "UInt32",
                "gpu_mem_info": "String", "avail_gpu_mem_in_gb": "UInt32", "extra_info": "Map(String, String)"},
    "benchmark": {"name": "String", "mode": "String", "dtype": "String", "extra_info": "Map(String, String)"},
    "model": {"name": "String", "type": "String", "backend": "String", "origins": "Array(String)",
              "extra_info": "Map(String, String)"},
    "dependencies": {"repo": "String", "branch": "String", "sha": "String", "version": "String",
                     "extra_info": "Map(String, String)"},
    "metric": {"name": "String", "benchmark_values": "Array(Float32)", "target_value": "Float32",
               "extra_info": "Map(String, String)"},
}


def _s(value) -> str:
    """A Map(String, String) value: strings as they are, everything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _smap(d: dict) -> dict[str, str]:
    return {str(k): _s(v) for k, v in d.items() if v is not None}


def _epoch(run: RunRow) -> int:
    for ts in (run.finished_at, run.started_at):
        if ts:
            try:
                return int(datetime.fromisoformat(ts).timestamp())
            except ValueError:
                continue
    return 0


def _hex_int(text: str | None, digits: int) -> int:
    t = (text or "")[:digits]
    return int(t, 16) if t and re.fullmatch(r"[0-9a-fA-F]+", t) else 0


def _repo(location: str | None) -> str:
    """owner/name of a git remote (https://github.com/o/n.git, git@host:o/n), credentials never kept;
    "" for a local path or an index."""
    loc = str(location or "")
    m = re.match(r"^(?:[a-z+]+://)?(?:[^@/]+@)?[^/:]+[:/](?P<path>[^:]+?)(?:\.git)?/?$", loc)
    if not m or loc.startswith(("/", ".", "file:")) or "://" not in loc and "@" not in loc:
        return ""
    parts = m.group("path").strip("/").split("/")
    return "/".join(parts[-2:]) if len(parts) >= 2 else ""


def _src_repo(src: dict) -> str:
    return _repo(src.get("location")) if src.get("kind") == "git" else ""  # never a package index


def _first_source(run: RunRow) -> tuple[str, dict]:
    sources = (run.lock or {}).get("sources") or {}
    name = "sglang" if "sglang" in sources else next(iter(sorted(sources)), "")
    return name, (sources.get(name) or {})


def _gpu_count(machine: dict) -> int:
    return len(machine.get("gpus") or machine.get("gpu_names") or [])


def _gpu_mem_gb(machine: dict) -> int:
    total = 0.0
    for g in machine.get("gpus") or []:
        if isinstance(g, dict):
            try:  # nvidia-smi's memory.total, MiB (toolkit/run/machine.py)
                total += float(g.get("memory.total") or 0) / 1024
            except ValueError:
                pass
    return int(total)


def _runner(run: RunRow) -> dict:
    m = run.machine or {}
    names = [g.get("name", "?") if isinstance(g, dict) else str(g) for g in (m.get("gpus") or m.get("gpu_names") or [])]
    return {"name": str(m.get("host") or run.host or ""), "type": str(run.gpu_key or "none"),
            "cpu_info": str(m.get("cpu") or ""), "cpu_count": int(m.get("cpu_count") or 0),
            "mem_info": "", "avail_mem_in_gb": 0,  # not recorded
            "gpu_info": ", ".join(dict.fromkeys(names)), "gpu_count": _gpu_count(m), "gpu_mem_info": "",
            "avail_gpu_mem_in_gb": _gpu_mem_gb(m),
            "extra_info": _smap({"platform": m.get("platform"), "python": m.get("python"), "cuda": m.get("cuda"),
                                 "driver": m.get("driver")})}


def _dependencies(run: RunRow) -> dict:
    sources = (run.lock or {}).get("sources") or {}
    out = {}
    for name, version in (("sglang", run.sglang_version), ("flashinfer", run.flashinfer_version)):
        src = sources.get(name) or {}
        if not version and not src:
            continue
        out[name] = {"repo": _src_repo(src), "branch": str(src.get("rev") or ""),
                     "sha": str((run.tree_hashes or {}).get(name) or ""), "version": str(version or ""),
                     "extra_info": _smap({"kind": src.get("kind"),
                                          "patches": [p.get("name") for p in src.get("patches") or []
                                                      if isinstance(p, dict)] or None})}
    return out


def _record(runs: Sequence[RunRow], metric: str, point: int, kind: str, unit: str, values: list[float]) -> dict:
    newest = max(runs, key=_epoch)
    resolved = newest.recipe_resolved or {}
    src_name, src = _first_source(newest)
    rev = str(src.get("rev") or "")
    params = {k: v for k, v in (newest.bench_params or {}).items() if k not in ("driver",)}
    hib = metrics.higher_is_better(metric)
    return {
        "timestamp": _epoch(newest),
        "schema_version": SCHEMA_VERSION,
        "name": f"patchbench {newest.recipe}",
        "repo": _src_repo(src),
        "head_branch": rev if rev and not re.fullmatch(r"[0-9a-f]{40}", rev) else "",
        "head_sha": str((newest.tree_hashes or {}).get(src_name) or ""),
        "workflow_id": _hex_int(newest.group_id, 12),
        "run_attempt": 1,
        "job_id": _hex_int(newest.identity, 15),
        "servicelab_experiment_id": 0,
        "servicelab_trial_id": 0,
        "runners": list({r["name"]: r for r in map(_runner, runs)}.values()),
        "benchmark": {"name": f"patchbench {newest.bench_driver or 'benchmark'}", "mode": "inference",
                      "dtype": str((resolved.get("roofline") or {}).get("weights") or ""),
                      "extra_info": _smap({"recipe": newest.recipe, "identity": newest.identity,
                                           "env_key": newest.env_key, "group_id": newest.group_id,
                                           "gpu_key": newest.gpu_key, "bench_key": newest.bench_key,
                                           **{f"param.{k}": v for k, v in sorted(params.items())}})},
        "model": {"name": str((resolved.get("server") or {}).get("model") or ""), "type": "llm", "backend": "sglang",
                  "origins": sorted((newest.lock or {}).get("sources") or {}),
                  "extra_info": _smap({"recipe": newest.recipe})},
        "inputs": {},
        "dependencies": _dependencies(newest),
        "metric": {"name": metric, "benchmark_values": [float(v) for v in values], "target_value": 0.0,
                   "extra_info": _smap({"unit": unit, "point": point, "point_kind": kind,
                                        "higher_is_better": hib if hib is not None else None,
                                        "run_ids": [r.run_id for r in runs],
                                        "status": sorted({r.status for r in runs})})},
    }


def records(runs: Iterable[RunRow], samples: Iterable[SampleRow]) -> list[dict]:
    """The HUD v3 records of `runs` (their `samples`): one per (recipe, run identity, group) x
    (metric, point), the per-run values in repeat order."""
    by_run: dict[str, list[SampleRow]] = defaultdict(list)
    for s in samples:
        by_run[s.run_id].append(s)
    groups: dict[tuple, list[RunRow]] = defaultdict(list)
    for r in runs:
        if by_run.get(r.run_id) and r.kind == "benchmark":  # profiles measure under the profiler
            groups[(r.recipe, r.identity, r.group_id or r.run_id)].append(r)
    out = []
    for key in sorted(groups, key=lambda k: (k[0], str(k[1]), str(k[2]))):
        rs = sorted(groups[key], key=lambda r: (r.repeat, r.started_at or ""))
        per: dict[tuple, dict[str, list[float]]] = defaultdict(dict)
        units: dict[tuple, str] = {}
        for r in rs:
            for s in by_run[r.run_id]:
                k = (s.metric, s.point, s.point_kind)
                per[k].setdefault(r.run_id, []).append(float(s.value))
                units.setdefault(k, s.unit)
        for (metric, point, kind) in sorted(per):
            have = [r for r in rs if r.run_id in per[metric, point, kind]]
            vals = [sum(per[metric, point, kind][r.run_id]) / len(per[metric, point, kind][r.run_id]) for r in have]
            out.append(_record(have, metric, point, kind, units[metric, point, kind], vals))
    return out
