"""`patchbench kernels RECIPE --op OP`: measure one op inside the recipe's env and store the table.

Steps: resolve the shapes (before anything is built: a bad --shapes fails at once) -> apply the
recipe's trees and build (or reuse) its env (`toolkit.run.pipeline.prepare`, until "build") -> ask the
env whether it has the op and which backends it offers (the probe, no kernel runs) -> without a CUDA
GPU, stop there with NoGPU (exit 3) for a GPU op -> per backend, measure every shape -> one record
per backend under $PATCHBENCH_HOME/kernels (toolkit.kernels.records). The probe runs with the env's
run environment plus the recipe's `[server.env]`, as the server would, and calls the op as sglang
0.5.23's runner does (`server_kernel_config`) at the layout sglang's static resolution of the recipe's
arguments gives (toolkit.kernels.static_layout: EP, attention DP, the chunk; the flags where there is none,
said in the notes); each record keeps that `configuration`, the backends
left out for the probe's call (`not_offered`) and how the calls were timed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from toolkit.errors import BadInput, NoGPU
from toolkit.kernels import records
from toolkit.kernels.measure import Settings, check_op, measure
from toolkit.kernels.registry import OpSpec
from toolkit.kernels.server_runner import describe, op_mismatch, server_runner
from toolkit.kernels.shapes import Shape
from toolkit.run import machine
from toolkit.run.parallel_layout import attention_dp_size, flag, layout, per_rank_chunk


@dataclass
class KernelRun:
    available: dict  # the probe's check: versions, backends, device
    records: list  # stored records (dicts with "_path")


FLASHINFER_TUNE_CAP = 8192  # FlashInfer's default tune_max_num_tokens, the cap sglang's runner applies
MAX_PREFILL_TOKENS = 16384  # sglang 0.5.23's default --max-prefill-tokens
_TRUE, _FALSE = ("true", "1", "yes", "y"), ("false", "0", "no", "n")  # sglang's EnvBool


def _environ(prepared) -> dict:
    return {**prepared.env.run_environ(), **dict(prepared.recipe.server.env)}


def server_kernel_config(args: dict, environ: dict, resolved: dict | None = None, why_not: str | None = None) -> dict:
    """How sglang 0.5.23's flashinfer_cutlass MoE runner calls cutlass_fused_moe for this server:
    use_fused_finalize from SGLANG_FLASHINFER_MOE_FUSED_FINALIZE (default False), and
    tune_max_num_tokens = min(each rank's prefill chunk x attention-DP size, 8192) (0.5.23 divides the
    chunk among the attention-DP ranks first; toolkit.run.parallel_layout), or the next power of two of each
    call's tokens on a PD decode server ("per-call"); "notes" say what was assumed.

    `resolved`: sglang's resolved config for the recipe's arguments (its static resolution or a stored
    /server_info): EP, attention DP and the chunk are read there, not from the flags (sglang sets ep_size
    to tp_size for the DeepEP/Mooncake/... all-to-all backends, sizes an unset chunked_prefill_size by GPU
    memory, and reports the chunk already divided per attention-DP rank: arg_groups/parallel_hook.py
    _handle_data_parallelism); without one the flags are read and `why_not` is said."""
    raw = str(environ.get("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", "false")).strip().lower()
    if raw not in _TRUE + _FALSE:
        raise BadInput(f"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE={raw!r} is not a boolean sglang reads",
                       hint="use true/false, 1/0, yes/no")
    out: dict = {"use_fused_finalize": raw in _TRUE, "notes": []}
    from_resolution = bool(resolved) and resolved.get("tp_size") is not None
    if from_resolution:
        args = resolved
    elif why_not:
        out["notes"].append(f"EP, attention DP and the prefill chunk read from the recipe's flags ({why_not})")
    ep = layout(args)["ep_size"]
    if ep > 1:
        out["notes"].append(
            f"EP {ep}: the MoE probe times one rank's share as a call of its own (E/{ep} experts, each token's "
            f"top-k/{ep} picks all local); sglang's runner passes every token's top-k global picks with "
            f"ep_size={ep}, ep_rank, and the kernel drops the non-local ones: that filtering and the uneven "
            "split of picks across ranks are not in the timed call")
    if str(flag(args, "disaggregation-mode") or "null") == "decode":
        out["tune_max_num_tokens"] = "per-call"
        return out
    try:
        chunk = flag(args, "chunked-prefill-size")
        chunk = None if chunk is None else int(chunk)
        most = int(flag(args, "max-prefill-tokens") or MAX_PREFILL_TOKENS)
    except (TypeError, ValueError):
        raise BadInput("chunked-prefill-size and max-prefill-tokens must be integers") from None
    dp = attention_dp_size(args)
    if chunk is None:
        out["tune_max_num_tokens"] = FLASHINFER_TUNE_CAP
        out["notes"].append("the recipe sets no chunked-prefill-size (sglang sizes it by GPU memory): "
                            f"tune_max_num_tokens taken as the {FLASHINFER_TUNE_CAP} cap")
    else:
        rank_chunk = chunk if from_resolution else per_rank_chunk(chunk, dp)  # resolved: already per rank
        prefill = rank_chunk if rank_chunk > 0 else most
        out["tune_max_num_tokens"] = min(prefill * dp, FLASHINFER_TUNE_CAP)
    return out


def _server_runner(recipe, resolved: dict, why_not: str | None):
    """The MoE runner / FP4 GEMM backend the recipe's server runs on its [target] GPU."""
    capability = None
    if getattr(recipe, "target", None) is not None:
        from toolkit.recipe.target import target_facts

        capability = tuple(target_facts(recipe.target)["capability"])
    source = ("sglang's static resolution" if resolved and resolved.get("tp_size") is not None
              else "the recipe's flags" + (f" ({why_not})" if why_not else ""))
    return server_runner(resolved, dict(recipe.server.args or {}), capability, source)


def run_kernels(recipe, op: OpSpec, shapes: list[Shape], *, home: Path, shapes_from: str,
                backends: list[str] | None = None, settings: Settings = Settings(), frozen: bool = False,
                console: Console | None = None, follow_server: bool = False,
                ms: tuple[int, ...] | None = None, other_runner: bool = False) -> KernelRun:
    """`follow_server`: tune FlashInfer's tactics where the recipe's sglang tunes them, not where it
    does not (toolkit.kernels.server_tuning), whatever `settings.autotune` says; either way the
    table's notes say what the server does. `shapes_from` "model": the shapes are derived again at the
    layout sglang's static resolution gives (toolkit.kernels.static_layout; `ms` narrows them), and the
    record's `shapes_basis` says which layout. An op that is not the kernel of the MoE runner the server
    resolves (toolkit.kernels.server_runner) is refused unless `other_runner`, which labels the record
    (`server_runner.times_servers_kernel` false, a note first in the table)."""
    from dataclasses import replace

    from toolkit.kernels.server_tuning import server_autotunes
    from toolkit.run.pipeline import prepare

    console = console or Console(stderr=True)
    p = prepare(recipe, home, until="build", frozen=frozen, console=console)
    from toolkit.kernels.static_layout import static_resolution

    environ = _environ(p)
    basis = None
    resolved, why_not = static_resolution(p, home)  # the layout sglang resolves, for the shapes and the call
    if shapes_from == "model":
        from toolkit.kernels.shapes import layout_of, resolve_shapes

        lay = layout_of(recipe, resolved, why_not)
        shapes, basis = resolve_shapes("model", recipe, op, ms, layout=lay), lay.basis
    runner = _server_runner(recipe, resolved, why_not)
    mismatch = op_mismatch(op.name, runner)
    if mismatch and not other_runner:
        raise BadInput(mismatch,
                       hint="time the server's own kernel, or set [server.args] moe-runner-backend = "
                            "\"flashinfer_cutlass\" (with quantization = \"modelopt_fp4\" on SM120); "
                            "--other-runner times it anyway, labelled as not the server's kernel",
                       recipe=recipe.name, step="kernels")
    server = server_kernel_config(dict(recipe.server.args), environ, resolved, why_not)
    server["notes"].extend(describe(op.name, runner))
    if mismatch:
        server["notes"].insert(0, f"NOT THE SERVER'S KERNEL (--other-runner): {mismatch}")
    log = Path(home) / "kernels" / "logs" / f"{recipe.name.replace('/', '__')}.log"
    info = check_op(p.env.python, op, environ, log=log, server=server)
    # the runner sglang resolved (0.5.10 turns `auto` into flashinfer_trtllm for an fp8/NVFP4 DeepSeek-style
    # model, server_args.py _handle_model_specific_adjustments; that runner tunes), over the recipe's flags
    tunes, why = server_autotunes((info.get("versions") or {}).get("sglang"),
                                  {**{str(k).replace("-", "_"): v for k, v in dict(recipe.server.args).items()},
                                   **resolved}, fp4_gemm=runner.fp4_gemm, capability=runner.capability)
    if follow_server:
        settings = replace(settings, autotune=tunes)
    elif settings.autotune != tunes:
        why += f"; this table {'tunes' if settings.autotune else 'does not tune'} (asked: --autotune/--no-autotune)"
    server["notes"].append(why)
    offered = list(info.get("backends") or [])
    left_out = dict(info.get("not_offered") or {})
    versions = ", ".join(f"{k} {v}" for k, v in sorted((info.get("versions") or {}).items()))
    console.print(f"[bold]{escape(recipe.name)}[/]: env {p.env.key[:12]} has {op.name} ({versions}); "
                  f"backends offered: {', '.join(offered) or 'none'}"
                  + "".join(f"\n  not offered: {why}" for why in left_out.values())
                  + (f"\n  model shapes at {basis}" if basis else "")
                  + "".join(f"\n  note: {n}" for n in server["notes"]))
    want = list(backends or offered)
    unknown = [b for b in want if b not in offered]
    if (settings.device or op.device) == "cuda" and not machine.has_cuda_gpu():
        raise NoGPU(f"no CUDA GPU on this machine: {recipe.name}'s env has {op.name} "
                    f"(backends {', '.join(offered) or 'none'}); timing it needs the GPU it runs on", step="measure")
    if unknown:
        raise BadInput(f"backend(s) {', '.join(unknown)} not offered by {op.name} in this env",
                       hint=f"offered here: {', '.join(offered) or 'none'}"
                            + "".join(f"; {left_out[b]}" for b in unknown if b in left_out))
    if not want:
        raise BadInput(f"{op.name} offers no backend on this machine", hint="pick another op or machine")
    stored = []
    for backend in want:
        console.print(f"  measuring {op.name} \\[{backend}] at {len(shapes)} shape(s): {settings.trials} trials x "
                      f"{settings.iters} iterations, cold L2")
        result = measure(p.env.python, op, shapes, backend=backend, settings=settings, environ=environ, log=log,
                         server=server)
        rec = {
            "recipe": recipe.name, "recipe_resolved": recipe.to_dict(), "env_key": p.env.key,
            "tree_hashes": {t.source: t.tree_hash for t in p.trees}, "arch_list": list(recipe.build.arch),
            "op": op.name, "backend": backend, "settings": settings.to_dict(), "shapes_from": shapes_from,
            "shapes_basis": basis,
            "machine": machine.provenance(),
            "probe": {k: result.get(k) for k in ("versions", "device", "gpu", "capability", "flush_bytes", "python")},
            "configuration": {**(result.get("configuration") or {}), "server_notes": server["notes"]},
            "server_runner": {"moe": runner.moe, "moe_configured": runner.configured, "fp4_gemm": runner.fp4_gemm,
                              "source": runner.source, "times_servers_kernel": not mismatch},
            "not_offered": left_out,
            "results": result["results"],
        }
        path = records.save(home, rec)
        rec["_path"] = str(path)
        stored.append(rec)
    return KernelRun(info, stored)
