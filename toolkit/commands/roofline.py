"""`patchbench roofline`: the theoretical decode ceiling of a model on a GPU, with its assumptions."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.table import Table

from toolkit import roofline as rl
from toolkit.roofline.comm import split_mode
from toolkit.run.parallel_layout import SHARED_TP1_A2A, a2a_dispatch_dtype

HELP = "theoretical decode tok/s (memory/compute/communication roofline) for a model on a GPU"


def _batches(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad batch list {text!r}: use e.g. 1,2,4,8") from None
    if not values:
        raise argparse.ArgumentTypeError("empty batch list: use e.g. 1,2,4,8")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        required=True,
        help=f"model NAME ({', '.join(rl.known_models())}) or path to a Hugging Face config.json (or its folder)",
    )
    parser.add_argument(
        "--gpu", required=True, help="GPU name from toolkit/data/gpus.toml, e.g. rtx-pro-6000, h200, b200"
    )
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size (GPUs), default 1")
    parser.add_argument("--ep", type=int, default=1, help="expert-parallel size, must divide --tp; default 1")
    parser.add_argument("--attn-dp", type=int, default=1,
                        help="attention data-parallel size within --tp (sglang's attn_dp_size, or --dp-size with "
                             "--enable-dp-attention): attention runs over tp/attn-dp GPUs; default 1")
    parser.add_argument("--attn-cp", type=int, default=1,
                        help="attention context-parallel size within --tp (sglang's attn_cp_size); default 1")
    parser.add_argument("--cp-decode-attn-tp", action="store_true", dest="cp_attn_tp",
                        help="sglang's --enable-cp-decode-attn-tp: at decode the attention's head-split weights are "
                             "sliced over the --attn-cp ranks too (MLA models); default off")
    parser.add_argument("--moe-dp", type=int, default=1,
                        help="MoE data-parallel size within --tp (sglang's moe_dp_size, equal to --attn-cp when > 1): "
                             "each group of tp/moe-dp GPUs holds every expert and runs its own tokens; default 1")
    parser.add_argument("--dcp", type=int, default=1,
                        help="decode context-parallel size within the attention TP (sglang's dcp_size): each GPU "
                             "holds 1/dcp of every sequence's KV cache; default 1")
    parser.add_argument("--dcp-comm-backend", default="a2a", dest="dcp_comm", choices=list(rl.DCP_COMMS),
                        help="how the DCP ranks merge partial attention outputs (sglang's --dcp-comm-backend): one "
                             "all-to-all (a2a, fi_a2a) or an all-gather + reduce-scatter (ag_rs); default a2a")
    parser.add_argument("--dcp-replicate-q-proj", action=argparse.BooleanOptionalAction, default=None,
                        dest="dcp_replicate_q",
                        help="sglang's --dcp-replicate-q-proj: no query all-gather in the DCP group (default: on for "
                             "DSA models under a2a/fi_a2a, as sglang 0.5.23 sets it)")
    parser.add_argument("--shared-experts-tp", type=int, default=None, dest="shared_tp",
                        help="GPUs a shared expert is split over (default: --tp; 1: replicated on every GPU, as "
                             "sglang builds them under --moe-a2a-backend deepep/mooncake/... or the FP4 all-gather)")
    parser.add_argument("--moe-a2a-backend", default="none", dest="moe_a2a",
                        choices=["none", *SHARED_TP1_A2A],
                        help="sglang's --moe-a2a-backend: the MoE layer's traffic is a dispatch + combine all-to-all of "
                             "the routed tokens instead of an all-reduce (shared experts replicated, as sglang builds "
                             "them); default none")
    parser.add_argument("--a2a-dispatch-dtype", default=None, dest="a2a_dispatch", choices=sorted(rl.DISPATCH_BYTES),
                        help="dtype the all-to-all dispatches hidden states in (default: what sglang 0.5.23 picks for "
                             "the backend with no flags: deepep fp8, mooncake fp8, nixl fp8, flashinfer bf16, else bf16)")
    parser.add_argument("--fp4-allgather", action="store_true",
                        help="sglang's FlashInfer cutlass FP4 all-gather MoE path (moe_runner_backend flashinfer_cutlass, "
                             "modelopt_fp4, attention DP = EP = TP): the MoE's tokens gathered in NVFP4 and the outputs "
                             "reduce-scattered in bf16, shared experts replicated; default off")
    parser.add_argument("--batch", type=_batches, default=[1, 2, 4, 8, 16, 32, 64], help="batch sizes, e.g. 1,2,4,8")
    parser.add_argument("--context", type=int, default=0, help="tokens in each sequence's KV cache (default 0)")
    parser.add_argument(
        "--weights",
        action="append",
        metavar="SPEC",
        help=f"weight format per component, e.g. {rl.DEFAULT_WEIGHTS!r} (default) or 'all=nvfp4,lm_head=bf16'; "
        f"repeatable (joined, later wins); formats: {', '.join(rl.BYTES_PER_PARAM)}",
    )
    parser.add_argument("--kv-dtype", default="bf16", choices=sorted(rl.KV_BYTES), help="KV cache dtype (default bf16)")
    parser.add_argument(
        "--sharding",
        default="even",
        choices=rl.SHARDINGS,
        help="'even': every weight byte split over TP (ideal, default); 'sglang': replicate what sglang replicates",
    )
    parser.add_argument(
        "--allreduce-latency-us", type=float, default=None, help="latency of one all-reduce (default: the GPU table's)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3f}"


def summary_table(result: rl.RooflineResult) -> Table:
    i = result.inputs
    title = (
        f"Decode roofline: {i.model.name} on {i.tp}x {i.gpu.key} (TP{i.tp}, EP{i.ep}"
        + (f", attention DP{i.attn_dp}" if i.attn_dp > 1 else "") + (f", attention CP{i.attn_cp}" if i.attn_cp > 1 else "")
        + (f", MoE DP{i.moe_dp}" if i.moe_dp > 1 else "") + (f", DCP{i.dcp}" if i.dcp > 1 else "")
        + (", FP4 all-gather" if i.fp4_allgather else "")
        + (f", MoE all-to-all {i.moe_a2a} ({i.a2a_dispatch} dispatch)" if i.moe_a2a != "none" else "") + f"), context {i.context}, "
        f"weights {i.weights.spec}, sharding {i.sharding}"
    )
    table = Table(title=title, title_justify="left")
    for header in (
        "batch",
        "distinct experts",
        "weights GB/GPU",
        "KV GB/GPU",
        "mem ms",
        "compute ms",
        "collectives",
        "comm MB/GPU",
        "comm ms",
        "step ms",
        "tok/s",
        "bound",
    ):
        table.add_column(header, justify="left" if header == "bound" else "right")
    for row in result.rows:
        ar = row.allreduce
        table.add_row(
            str(row.batch),
            f"{row.distinct_experts:.1f}" if i.model.is_moe else "-",
            _gb(row.weight_bytes),
            _gb(row.kv_bytes),
            _ms(row.mem_s),
            _ms(row.compute_s),
            str(ar.count),
            f"{ar.bytes_per_gpu / 1e6:.2f}",
            _ms(ar.time_s),
            _ms(row.step_s),
            f"{row.tok_s:,.1f}",
            row.bound,
        )
    return table


def component_table(result: rl.RooflineResult) -> Table:
    table = Table(
        title="Per component, per GPU per step: GB read / ms (M memory-bound, C compute-bound); per collective: "
              "count x / ms (attention DP: sglang's padding mode)", title_justify="left"
    )
    table.add_column("component")
    table.add_column("format")
    for row in result.rows:
        table.add_column(f"b={row.batch}", justify="right")
    first = result.rows[0]
    for comp in first.components:
        cells = []
        for row in result.rows:
            c = row.component(comp.name)
            cells.append(f"{_gb(c.bytes)} / {_ms(c.time_s)} {'C' if c.bound == 'compute' else 'M'}")
        table.add_row(comp.name, comp.fmt, *cells)
    for i, (what, _, _) in enumerate(first.allreduce.parts):
        cells = []
        for row in result.rows:  # the same parts at every batch; the attention-DP padding mode can differ
            mode = split_mode(row.allreduce.parts[i][0])[1]
            cells.append(f"{row.allreduce.parts[i][1]} x / {_ms(row.allreduce.part_time_s(i))}" + (f" {mode}" if mode else ""))
        table.add_row(split_mode(what)[0], "", *cells)
    return table


def run(args: argparse.Namespace) -> int:
    a2a, shared_tp = args.moe_a2a, args.shared_tp
    dispatch = args.a2a_dispatch or a2a_dispatch_dtype({"moe_a2a_backend": a2a})[0]
    if (a2a != "none" or args.fp4_allgather) and shared_tp is None:
        shared_tp = 1  # sglang 0.5.23 builds the shared experts replicated there (parallel_layout.shared_experts_tp)
    inputs = rl.make_inputs(
        args.model,
        args.gpu,
        tp=args.tp,
        ep=args.ep,
        batches=args.batch,
        context=args.context,
        weights=args.weights,
        kv_dtype=args.kv_dtype,
        allreduce_latency_us=args.allreduce_latency_us,
        sharding=args.sharding,
        attn_dp=args.attn_dp,
        attn_cp=args.attn_cp,
        moe_dp=args.moe_dp,
        shared_tp=shared_tp,
        dcp=args.dcp,
        moe_a2a=a2a,
        a2a_dispatch=dispatch,
        fp4_allgather=args.fp4_allgather,
        dcp_comm=args.dcp_comm,
        dcp_replicate_q=args.dcp_replicate_q,
        cp_attn_tp=args.cp_attn_tp,
    )
    result = rl.roofline(inputs)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return 0
    console = Console(file=sys.stdout)
    if not console.is_terminal:
        console = Console(file=sys.stdout, width=200)
    console.print(summary_table(result))
    console.print(component_table(result))
    console.print("Assumptions:", style="bold")
    for line in result.assumptions:
        console.print(f"  - {line}", highlight=False)
    return 0


__all__ = ["HELP", "add_arguments", "run"]
