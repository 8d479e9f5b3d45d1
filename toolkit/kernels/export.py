"""Export kernel records as flashinfer-bench data: definitions, workloads, solutions and traces.

flashinfer-bench (github.com/flashinfer-ai/flashinfer-bench) names four things: a *definition* (an
op with symbolic axes, `var` or `const`, typed inputs/outputs and a reference), a *workload* (values
for the var axes and how inputs are made), a *solution* (an implementation; here: the recipe, its env
and the backend) and a *trace* (one evaluation of a solution on a workload: status, correctness,
performance, environment). Layout written under DIR, as flashinfer-bench's trace sets are laid out:

    definitions/<definition>.json
    workloads/<definition>.jsonl                      workload-only traces (solution, evaluation null)
    solutions/<author>/<op_type>/<definition>/<solution>.json
    traces/<author>/<op_type>/<definition>.jsonl      one line per (solution, workload)

Status: PASSED (checked and timed), INCORRECT_NUMERICAL (the correctness check failed: no
performance, as that schema requires) or RUNTIME_ERROR. Effects: writes files under DIR only.
"""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

from toolkit.kernels.records import _safe  # one file-safe name rule for kernel files
from toolkit.kernels.registry import OPS, OpSpec
from toolkit.kernels.table import rows

AUTHOR = "patchbench"
_NS = uuid.UUID("6d7a3f5e-3c1b-4d59-9a57-2f0f1c0b5e24")


def _finite(x):
    """JSON has no NaN: non-finite floats become the strings flashinfer-bench's schema writes."""
    if isinstance(x, float) and not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def definition_name(op: OpSpec, dims: dict) -> str:
    if op.kind == "gemm":
        return f"{op.fi_op_type}_n{dims['n']}_k{dims['k']}"
    return f"moe_fp4_cutlass_e{dims['experts']}_topk{dims['top_k']}_h{dims['hidden']}_i{dims['inter']}"


def definition(op: OpSpec, dims: dict) -> dict:
    fp4 = op.weight_format == "nvfp4"
    if op.kind == "gemm":
        dt = "float4_e2m1fn_x2" if fp4 else "bfloat16"
        inputs = {"A": {"shape": ["M", "K"], "dtype": dt}, "B": {"shape": ["N", "K"], "dtype": dt}}
        if fp4:
            inputs |= {"a_descale": {"shape": ["M", "K_div_16"], "dtype": "float8_e4m3fn"},
                       "b_descale": {"shape": ["N", "K_div_16"], "dtype": "float8_e4m3fn"},
                       "alpha": {"shape": [], "dtype": "float32"}}
        ref = ("import torch\n\ndef run(A, B):\n"
               "    # A, B: the dequantized operands (E2M1 x E4M3 block scale / global scale), in fp32\n"
               "    return (A.float() @ B.float().T).to(torch.bfloat16)\n")
        axes = {"M": {"type": "var"}, "N": {"type": "const", "value": dims["n"]},
                "K": {"type": "const", "value": dims["k"]}}
        outputs = {"C": {"shape": ["M", "N"], "dtype": "bfloat16"}}
    else:
        axes = {"T": {"type": "var"}, "E": {"type": "const", "value": dims["experts"]},
                "TOPK": {"type": "const", "value": dims["top_k"]}, "H": {"type": "const", "value": dims["hidden"]},
                "I": {"type": "const", "value": dims["inter"]}}
        inputs = {"hidden_states": {"shape": ["T", "H"], "dtype": "bfloat16"},
                  "selected_experts": {"shape": ["T", "TOPK"], "dtype": "int32"},
                  "routing_weights": {"shape": ["T", "TOPK"], "dtype": "float32"},
                  "w13": {"shape": ["E", "2I", "H"], "dtype": "float4_e2m1fn_x2"},
                  "w2": {"shape": ["E", "H", "I"], "dtype": "float4_e2m1fn_x2"}}
        outputs = {"output": {"shape": ["T", "H"], "dtype": "bfloat16"}}
        ref = ("import torch\n\ndef run(x, sel, w, w13, w2):\n"
               "    # dequantized fp32 operands; the intermediate is requantized to NVFP4 as the kernel does\n"
               "    out = torch.zeros_like(x, dtype=torch.float32)\n"
               "    i = w2.shape[-1]\n"
               "    for t in range(x.shape[0]):\n"
               "        for s in range(sel.shape[1]):\n"
               "            e = int(sel[t, s])\n"
               "            h = torch.nn.functional.silu(x[t] @ w13[e, i:].T) * (x[t] @ w13[e, :i].T)\n"
               "            out[t] += w[t, s] * (h @ w2[e].T)\n"
               "    return out.to(torch.bfloat16)\n")
    return {"name": definition_name(op, dims), "op_type": op.fi_op_type, "description": op.description,
            "tags": [f"fi_api:{op.name}", "source:patchbench"], "axes": axes, "inputs": inputs,
            "outputs": outputs, "reference": ref}


def workload(op: OpSpec, dims: dict, seed: int) -> dict:
    var = {"M": dims["m"]} if op.kind == "gemm" else {"T": dims["tokens"]}
    name = definition_name(op, dims)
    inputs = {k: {"type": "random"} for k in definition(op, dims)["inputs"]}
    return {"axes": var, "inputs": inputs, "uuid": str(uuid.uuid5(_NS, f"{name}/{var}/{seed}"))}


def solution_name(record: dict) -> str:
    return _safe(f"{AUTHOR}_{record['recipe']}_{record.get('backend')}_{record.get('env_key', '')[:12]}")


def solution(record: dict, op: OpSpec, def_name: str, hardware: str) -> dict:
    versions = (record.get("probe") or {}).get("versions") or {}
    backend = record.get("backend")
    src = (f'"""patchbench recipe {record["recipe"]}: {op.name} with backend {backend!r}, in env '
           f'{record.get("env_key")} (trees: {json.dumps(record.get("tree_hashes") or {})})."""\n'
           f"import flashinfer\n\n\ndef run(*args, **kwargs):\n"
           f"    return flashinfer.{op.name.split('.', 1)[1]}(*args, **kwargs"
           + (f", backend={backend!r})\n" if op.kind == "gemm" and backend else ")\n"))
    return {"name": solution_name(record), "definition": def_name, "author": AUTHOR,
            "description": f"recipe {record['recipe']} ({(record.get('recipe_resolved') or {}).get('description', '')}); "
                           f"env {record.get('env_key')}; arch {record.get('arch_list')}",
            "spec": {"language": "python", "target_hardware": [hardware], "entry_point": "main.py::run",
                     "dependencies": [f"{k}=={v}" for k, v in sorted(versions.items())]},
            "sources": [{"path": "main.py", "content": src}]}


def trace(record: dict, op: OpSpec, row, hardware: str) -> dict:
    dims = row.dims
    ev = {"environment": {"hardware": hardware, "libs": (record.get("probe") or {}).get("versions") or {}},
          "timestamp": record.get("created", ""), "log": row.error}
    corr = {"max_relative_error": _finite(row.max_relative_error if row.max_relative_error is not None else math.nan),
            "max_absolute_error": _finite(_abs_err(record, row)),
            "extra": {"within_tolerance": row.within_tolerance, "verdict": row.verdict,
                      "efficiency_vs_roofline": row.efficiency, "floor_ms": row.floor_ms,
                      "trial_median_ms": row.trial_ms}}
    if row.status != "ok":
        ev["status"] = "RUNTIME_ERROR"
    elif row.verdict == "ok":
        ev |= {"status": "PASSED", "correctness": corr,
               "performance": {"latency_ms": row.median_ms, "reference_latency_ms": 0.0, "speedup_factor": 0.0}}
    else:
        ev |= {"status": "INCORRECT_NUMERICAL", "correctness": corr}
    return {"definition": definition_name(op, dims), "workload": workload(op, dims, (record.get("settings") or {}).get("seed", 0)),
            "solution": solution_name(record), "evaluation": ev}


def _abs_err(record: dict, row) -> float:
    for res in record["results"]:
        if res.get("shape") == row.dims and res.get("label", "") == row.label:
            return float((res.get("correctness") or {}).get("max_abs_error", math.nan))
    return math.nan


def export(records: list[dict], out_dir: str | Path) -> dict:
    """Write every record's definitions, workloads, solutions and traces; returns counts and paths."""
    out = Path(out_dir)
    defs: dict[str, dict] = {}
    workloads: dict[str, dict[str, dict]] = {}
    traces: dict[str, list[dict]] = {}
    sols: dict[tuple, dict] = {}
    for rec in records:
        op = OPS[rec["op"]]
        hardware = _safe((rec.get("probe") or {}).get("gpu") or (rec.get("probe") or {}).get("device") or "unknown")
        for row in rows(rec):
            d = definition(op, row.dims)
            defs[d["name"]] = d
            tr = trace(rec, op, row, hardware)
            workloads.setdefault(d["name"], {})[tr["workload"]["uuid"]] = {
                "definition": d["name"], "workload": tr["workload"], "solution": None, "evaluation": None}
            traces.setdefault(d["name"], []).append(tr)
            sols[(d["name"], tr["solution"])] = solution(rec, op, d["name"], hardware)
    for name, d in defs.items():
        _write(out / "definitions" / f"{name}.json", json.dumps(d, indent=2))
        _write(out / "workloads" / f"{name}.jsonl", "".join(json.dumps(w) + "\n" for w in workloads[name].values()))
        _write(out / "traces" / AUTHOR / d["op_type"] / f"{name}.jsonl",
               "".join(json.dumps(_finite(t)) + "\n" for t in traces[name]))
    for (name, sname), s in sols.items():
        _write(out / "solutions" / AUTHOR / defs[name]["op_type"] / name / f"{sname}.json", json.dumps(s, indent=2))
    return {"dir": str(out), "definitions": len(defs), "solutions": len(sols),
            "traces": sum(len(v) for v in traces.values())}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
