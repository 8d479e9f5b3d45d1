"""Patch activation evidence: did each patch of the recipe run in the live server?

A recipe declares, per patch, what a live server shows when the change is active
(`[evidence."PATCH"]`: a server-log regex with a minimum count, and/or /server_info fields). After
the benchmark the pipeline hands the server log and /server_info here; a patch whose evidence is
missing makes the run `invalid`, with the reason. A patch without declared evidence is allowed and
reported as `undeclared` (results and the report flag it). Named groups of a log regex become
run-level metrics: the mean of the numbers they captured (OEA's `distinct_experts`), and
`metrics_source` says where such a number was measured. A patch that logs from Python sees only
eagerly run calls: with CUDA graphs on (no `--disable-cuda-graph`) its lines never come from the
replayed decode steps the benchmark times, so such a metric says "eager calls, outside CUDA graphs".
A patch whose line says it counted on the device (DEVICE_COUNTED: the shipped OEA patch adds its
counts with fixed-shape ops inside the captured graphs and logs them when a forward ends) is read
as what it says: device counts over the decode steps, graph replays included.

On CPU, real sglang runs with upstream/sgl-kernel-standin in place of sgl_kernel: its names raise
when called and log `STANDIN_MARKER <name>` first. A server log holding that line is a run that
reached no real kernel, so it is a problem of every run, whatever its patches.

Pure: takes text and dicts, returns a verdict.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from toolkit.recipe.spec import EvidenceSpec

OK, MISSING, UNDECLARED = "ok", "missing", "undeclared"
STANDIN_MARKER = "patchbench sgl_kernel stand-in called:"
# what a patch's evidence line says when its numbers were counted on the device, graph replays included
DEVICE_COUNTED = "counted on the device: CUDA-graph replays included"  # upstream/sgl-kernel-standin/src/sgl_kernel


def standin_calls(log_text: str) -> list[str]:
    """The sgl_kernel stand-in's names the server called, in log order (empty in a real run)."""
    return [line.split(STANDIN_MARKER, 1)[1].strip() for line in log_text.splitlines()
            if STANDIN_MARKER in line]


@dataclass
class EvidenceVerdict:
    status: dict[str, str] = field(default_factory=dict)  # patch -> ok | missing | undeclared
    problems: list[str] = field(default_factory=list)  # one line per missing proof
    metrics: dict[str, float] = field(default_factory=dict)  # named regex groups, mean over matches
    counts: dict[str, int] = field(default_factory=dict)  # patch -> matching log lines
    metric_counts: dict[str, int] = field(default_factory=dict)  # metric -> log lines it was averaged over
    device_counted: set = field(default_factory=set)  # metrics whose lines say DEVICE_COUNTED

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {"status": self.status, "problems": self.problems, "metrics": self.metrics, "counts": self.counts,
                "metric_counts": self.metric_counts}


def _same(want: Any, got: Any) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return str(want).lower() == str(got).lower()
    try:
        return float(want) == float(got)
    except (TypeError, ValueError):
        return str(want) == str(got)


def _log_matches(pattern: str, log_text: str) -> list[re.Match]:
    rx = re.compile(pattern)
    return [m for m in (rx.search(line) for line in log_text.splitlines()) if m]


def _group_values(matches: list[re.Match]) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {}
    for m in matches:
        for name, text in m.groupdict().items():
            try:
                values.setdefault(name, []).append(float(text))
            except (TypeError, ValueError):
                continue
    return {name: vals for name, vals in values.items() if vals}


def decode_graphs(server_argv: Iterable[str], server_info: Mapping[str, Any] | None = None) -> bool:
    """Did the server replay decode steps from CUDA graphs? What it reports decides: sglang 0.5.23's
    /server_info `cuda_graph_config.decode.backend` ("disabled" on CPU, or with
    `--cuda-graph-backend-decode disabled`, 0.5.23's spelling of the deprecated `--disable-cuda-graph`),
    else its `disable_cuda_graph`; without /server_info, the flags of either spelling."""
    info = server_info or {}
    cfg = info.get("cuda_graph_config")
    decode = cfg.get("decode") if isinstance(cfg, Mapping) else None
    if isinstance(decode, Mapping) and decode.get("backend") is not None:
        return str(decode["backend"]).lower() != "disabled"
    if info.get("disable_cuda_graph") is True:
        return False
    argv = list(server_argv)
    if "--disable-cuda-graph" in argv or "--disable-decode-cuda-graph" in argv:
        return False
    for i, arg in enumerate(argv):
        if arg == "--cuda-graph-backend-decode" and i + 1 < len(argv) and argv[i + 1].lower() == "disabled":
            return False
        if arg.lower() == "--cuda-graph-backend-decode=disabled":
            return False
    return True


def metrics_source(verdict: EvidenceVerdict, server_argv: Iterable[str],
                   server_info: Mapping[str, Any] | None = None) -> dict[str, str]:
    """metric -> where it was measured, e.g. "from 12 eager calls, outside CUDA graphs" (stored in
    the run's extra["evidence_metrics_source"]; compare and report print it beside the value).
    `server_info`: the live server's /server_info, which says whether decode ran in graphs at all."""
    graphs = decode_graphs(server_argv, server_info)
    where = "eager calls, outside CUDA graphs" if graphs else "calls (CUDA graphs disabled: every step eager)"
    out = {}
    for m in verdict.metrics:
        n = verdict.metric_counts.get(m, 0)
        out[m] = (f"from {n} log line(s) of device counts over the decode steps (CUDA-graph replays included)"
                  if m in verdict.device_counted else f"from {n} {where}")
    return out


def run_extra(verdict: EvidenceVerdict, server_argv: Iterable[str],
              server_info: Mapping[str, Any] | None = None) -> dict:
    """What a run keeps of its evidence verdict in its `extra`: each patch's status, the metrics
    its log lines gave, and where those were measured."""
    out: dict = {"evidence": verdict.status}
    if verdict.metrics:
        out.update(evidence_metrics=verdict.metrics,
                   evidence_metrics_source=metrics_source(verdict, server_argv, server_info))
    return out


def check_evidence(patches: Iterable[str], specs: Mapping[str, EvidenceSpec], log_text: str,
                   server_info: Mapping[str, Any] | None) -> EvidenceVerdict:
    """The verdict for every patch of a run, from its server log and /server_info."""
    verdict = EvidenceVerdict()
    called = standin_calls(log_text)
    if called:
        verdict.problems.append(f"the server called the sgl_kernel stand-in (no kernel): {', '.join(sorted(set(called)))}")
    for patch in patches:
        spec = specs.get(patch)
        if spec is None:
            verdict.status[patch] = UNDECLARED
            continue
        problems = []
        if spec.log:
            matches = _log_matches(spec.log, log_text)
            verdict.counts[patch] = len(matches)
            if len(matches) < spec.min_count:
                problems.append(f"{patch}: {len(matches)} of >= {spec.min_count} {spec.log!r} lines in server.log")
            for name, vals in _group_values(matches).items():
                verdict.metrics[name] = statistics.fmean(vals)
                verdict.metric_counts[name] = len(vals)
                if matches and all(DEVICE_COUNTED in m.string for m in matches):
                    verdict.device_counted.add(name)
        for key, want in spec.server_info:
            if server_info is None or key not in server_info:
                problems.append(f"{patch}: /server_info has no field `{key}` (expected {want!r})")
            elif not _same(want, server_info[key]):
                problems.append(f"{patch}: /server_info {key} = {server_info[key]!r}, expected {want!r}")
        verdict.status[patch] = MISSING if problems else OK
        verdict.problems.extend(problems)
    return verdict
