"""The decode roofline's communication term is what sglang 0.5.23 communicates at the layout, worked by hand
for GLM-5 (toolkit/data/models/glm-5.json: hidden 6144, 78 layers = 3 dense + 75 MoE, top-8 of 256 experts)
on 8 RTX PRO 6000 over PCIe (64 GB/s a direction, 10 us a collective):

- TP8: an all-reduce after attention and one after the MLP/MoE in every layer.
- TP8 + EP8 + --moe-a2a-backend deepep: the MoE runs on each rank's own rows, so a MoE layer's attention
  output is reduce-scattered and all-gathered over TP8 (rows padded to 8), and the MoE sends its tokens'
  top-8 copies (7/8 of them to other ranks) as an fp8 dispatch and a bf16 combine: no MoE all-reduce.
- attention DP8: no attention all-reduce; the MLP/MoE's tokens are gathered over TP8 and reduced back, the
  cheaper of sglang's SUM_LEN (two all-reduces of the summed rows) and MAX_LEN (all-gather + reduce-scatter
  of every rank padded to the largest), every rank padded to the busiest as a CUDA-graph decode step pads it.
"""

from __future__ import annotations

import json

import pytest

from toolkit.cli import main
from toolkit.roofline import make_inputs, roofline, theoretical_tok_s
from toolkit.run.parallel_layout import roofline_layout

ROW = 6144 * 2  # one token's bf16 hidden state
FP8 = 1 + 4 / 128  # DeepEP's fp8 dispatch: 1 B an element + an fp32 scale per 128


def _comm(b: int, weights: str = "all=nvfp4", **kw):
    return roofline(make_inputs("glm-5", "rtx-pro-6000", tp=8, batches=(b,), weights=weights, **kw)).rows[0]


@pytest.mark.parametrize("b, kw, count, nbytes", [
    # TP8: 156 all-reduces of b rows, 2 x 7/8 of the message each
    (1, {}, 156, 156 * 2 * 7 / 8 * ROW),
    (16, {}, 156, 156 * 2 * 7 / 8 * 16 * ROW),
    # deepep: 3 dense layers keep both all-reduces; 75 MoE layers: RS + AG of 8 padded rows (2 x 7/8 x 8 rows)
    # and a dispatch + combine of 1 token x 8 copies x 7/8 remote, fp8 out and bf16 back
    (1, dict(ep=8, moe_a2a="deepep", a2a_dispatch="fp8", shared_tp=1), 3 + 150 + 150 + 3,
     6 * 2 * 7 / 8 * ROW + 75 * 2 * 7 / 8 * 8 * ROW + 75 * 7 * 6144 * (FP8 + 2)),
    # b=16: 16 rows (already a multiple of 8) and 2 tokens a rank
    (16, dict(ep=8, moe_a2a="deepep", a2a_dispatch="fp8", shared_tp=1), 306,
     6 * 2 * 7 / 8 * 16 * ROW + 75 * 2 * 7 / 8 * 16 * ROW + 75 * 2 * 7 * 6144 * (FP8 + 2)),
    # NVFP4 dispatch (SGLANG_MOE_NVFP4_DISPATCH): 0.5 B + an fp8 scale per 16
    (1, dict(ep=8, moe_a2a="deepep", a2a_dispatch="nvfp4", shared_tp=1), 306,
     6 * 2 * 7 / 8 * ROW + 75 * 2 * 7 / 8 * 8 * ROW + 75 * 7 * 6144 * (0.5625 + 2)),
    # attention DP8, b=1: the CUDA graph runs every rank at 1 row, so MAX_LEN: AG + RS of 8 rows in each of the 78
    # layers (the 3 dense MLPs over TP8 are gathered too; SUM_LEN would all-reduce the same 8 rows twice); and
    # before lm_head one all-reduce of the 8 ranks' last hidden states (2 x 7/8 x 8 rows)
    (1, dict(attn_dp=8), 157, 78 * 2 * 7 / 8 * 8 * ROW + 2 * 7 / 8 * 8 * ROW),
    # b=16: 2 tokens a rank; MAX_LEN (AG + RS of 8 x 2 rows: 2 x 7/8 x 16 rows) beats SUM_LEN (4 x 7/8 x 16 rows);
    # lm_head's gather: 8 x 2 rows
    (16, dict(attn_dp=8), 157, 78 * 2 * 7 / 8 * 16 * ROW + 2 * 7 / 8 * 16 * ROW),
])
def test_glm5_communication_worked_by_hand(b, kw, count, nbytes):
    ar = _comm(b, **kw).allreduce
    assert ar.count == count
    assert ar.bytes_per_gpu == pytest.approx(nbytes)
    assert ar.time_s == pytest.approx(count * 10e-6 + nbytes / 64e9)


def test_deepep_on_pcie_is_not_priced_as_an_all_reduce():
    """At b=1 over PCIe the all-to-all layout moves ~7x the bytes of TP8's all-reduces and runs ~2x the
    collectives: its roofline is well below TP8's, and the NVLink table row makes the same traffic cheaper."""
    tp8, a2a = _comm(1), _comm(1, ep=8, moe_a2a="deepep", a2a_dispatch="fp8", shared_tp=1)
    assert a2a.allreduce.bytes_per_gpu > 6 * tp8.allreduce.bytes_per_gpu
    assert a2a.allreduce.time_s > 1.9 * tp8.allreduce.time_s
    pcie = a2a.allreduce.transfer_s
    nvl = roofline(make_inputs("glm-5", "b200", tp=8, ep=8, moe_a2a="deepep", a2a_dispatch="fp8", shared_tp=1,
                               weights="all=nvfp4")).rows[0].allreduce.transfer_s
    assert nvl == pytest.approx(pcie * 64 / 900)


def test_server_info_layout_carries_the_a2a_backend_and_its_dispatch_dtype():
    """The efficiency line's denominator comes from /server_info: deepep (EP8, shared experts replicated) with
    its fp8 default, or NVFP4 where the server's env asks for it on a modelopt_fp4 checkpoint; it is said."""
    info = {"tp_size": 8, "ep_size": 8, "moe_a2a_backend": "deepep", "quantization": "modelopt_fp4"}
    kw, text = roofline_layout(info)
    assert (kw["moe_a2a"], kw["a2a_dispatch"], kw["shared_tp"]) == ("deepep", "fp8", 1)
    assert "MoE all-to-all deepep (fp8 dispatch: deepep's default)" in text
    kw4, text4 = roofline_layout(info, environ={"SGLANG_MOE_NVFP4_DISPATCH": "1"})
    assert kw4["a2a_dispatch"] == "nvfp4" and "nvfp4 dispatch" in text4
    kwb, _ = roofline_layout({**info, "deepep_dispatcher_output_dtype": "bf16"})
    assert kwb["a2a_dispatch"] == "bf16"
    theo = theoretical_tok_s("glm-5", "rtx-pro-6000", batch=1, context=0, weights="all=nvfp4", **kw)
    tp8 = theoretical_tok_s("glm-5", "rtx-pro-6000", tp=8, ep=1, batch=1, context=0, weights="all=nvfp4")
    assert theo < tp8 * 0.7  # replicated shared experts and the PCIe all-to-all, not TP8's all-reduces
    assert roofline_layout({"tp_size": 8})[0].get("moe_a2a", "none") == "none"


def test_cli_says_what_was_modelled(capsys):
    assert main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--ep", "8",
                 "--moe-a2a-backend", "deepep", "--batch", "1", "--weights", "all=nvfp4"]) == 0
    out = capsys.readouterr().out
    assert "MoE deepep dispatch (fp8) + combine (bf16)" in out
    assert "attention reduce-scatter + all-gather" in out
    assert "MoE under --moe-a2a-backend deepep: no all-reduce" in out
    assert "shared experts replicated on every GPU" in out  # as sglang builds them under deepep
    assert main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--attn-dp", "8",
                 "--batch", "1,16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["what"] for r in data["rows"] for p in r["allreduce"]["parts"]] == [
        "MoE DP gather + scatter (MAX_LEN)", "dense MLP DP gather + scatter (MAX_LEN)", "lm_head DP gather (all-reduce)",
        "MoE DP gather + scatter (MAX_LEN)", "dense MLP DP gather + scatter (MAX_LEN)", "lm_head DP gather (all-reduce)"]
    assert any("gathered over TP 8 before it and reduced back" in line for line in data["assumptions"])


def test_a2a_with_moe_dp_is_a_clear_error(capsys):
    rc = main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--attn-cp", "2",
               "--moe-dp", "2", "--ep", "4", "--moe-a2a-backend", "deepep"])
    err = capsys.readouterr().err
    assert rc != 0 and "MoE DP 2 under --moe-a2a-backend deepep is not modelled" in err
    assert "dispatches over the whole TP group (layers/moe/fused_moe_triton/layer.py:163-172)" in err
    assert "Traceback" not in err


FP4_INFO = {"tp_size": 8, "ep_size": 8, "attn_dp_size": 8, "dp_size": 1, "enable_dp_attention": True,
            "moe_a2a_backend": "none", "moe_runner_backend": "flashinfer_cutlass", "quantization": "modelopt_fp4",
            "disable_flashinfer_cutlass_moe_fp4_allgather": False}


def test_flashinfer_fp4_allgather_moves_nvfp4_tokens_not_a_bf16_dp_gather(capsys):
    """sglang 0.5.23's FlashInfer cutlass FP4 all-gather (layers/moe/utils.py:707-718; token_dispatcher/standard.py
    :177-210 and :288-300): each MoE layer all-gathers the b tokens over TP8 as NVFP4 (0.5 B + an fp8 scale per 16)
    with their top-8 fp32 weights and int32 ids in one grouped call, and reduce-scatters the bf16 outputs back.
    /server_info's resolved fields select it; it was priced as the bf16 DP gather + scatter."""
    kw, text = roofline_layout(FP4_INFO)
    kw = {k: v for k, v in kw.items() if k != "tp"}
    assert kw["fp4_allgather"] is True and kw["shared_tp"] == 1 and "FP4 all-gather" in text
    assert "fp4_allgather" not in roofline_layout({**FP4_INFO, "disable_flashinfer_cutlass_moe_fp4_allgather": True})[0]
    for b in (1, 64):
        ar = _comm(b, **kw).allreduce
        rows = {1: 8, 64: 64}[b]  # every rank padded to the busiest's rows (CUDA-graph decode): 8 x ceil(b / 8)
        moe = 75 * (7 / 8 * rows * (6144 * 0.5625 + 8 * 8) + 7 / 8 * rows * ROW)
        dense = 3 * 2 * 7 / 8 * rows * ROW  # the 3 dense layers' DP gather (MAX_LEN of the same padded rows)
        head = 2 * 7 / 8 * rows * ROW  # lm_head's gather of the 8 ranks' (padded) rows
        assert ar.count == 157 and ar.bytes_per_gpu == pytest.approx(moe + dense + head)
        assert ar.parts[0][0] == "MoE FP4 all-gather (nvfp4) + reduce-scatter (bf16)"
        bf16 = _comm(b, **{**kw, "fp4_allgather": False}).allreduce
        assert ar.bytes_per_gpu < 0.7 * bf16.bytes_per_gpu
    assert main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--ep", "8", "--attn-dp", "8",
                 "--fp4-allgather", "--batch", "1", "--weights", "all=nvfp4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fp4_allgather"] and data["shared_tp"] == 1
    assert data["rows"][0]["allreduce"]["bytes_per_gpu"] == pytest.approx(_comm(1, **kw).allreduce.bytes_per_gpu)
    assert any("FP4 all-gather" in line and "NVFP4" in line for line in data["assumptions"])
    rc = main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--ep", "8", "--fp4-allgather"])
    err = capsys.readouterr().err
    assert rc != 0 and "FP4 all-gather needs a MoE model with attention DP = EP = TP" in err and "Traceback" not in err


def test_bound_names_the_collective_and_each_batch_keeps_its_padding_mode(capsys):
    """A communication-bound row says which collective costs most (under deepep there is no all-reduce after
    the MoE: it used to say "all-reduce"), and the per-collective rows show each batch's own attention-DP
    padding mode (the b=64 column was labelled with b=1's SUM_LEN while priced as MAX_LEN)."""
    args = ["roofline", "--model", "qwen3-30b-a3b", "--gpu", "rtx-pro-6000", "--tp", "8", "--ep", "8", "--batch", "1",
            "--weights", "all=nvfp4", "--moe-a2a-backend", "deepep"]
    assert main(args + ["--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    times = {p["what"]: p["count"] * 10e-6 + p["bytes_per_gpu"] / 64e9 for p in row["allreduce"]["parts"]}
    assert row["allreduce"]["time_s"] > row["mem_s"] + row["compute_s"]
    assert row["bound"] == f"comm: {max(times, key=times.get)}" == "comm: attention reduce-scatter + all-gather"
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "comm: attention reduce-scatter + all-gather" in out and "│ all-reduce" not in out
    assert "MoE all-to-all deepep (fp8 dispatch)" in out  # the title names the layout
    assert main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--attn-dp", "8",
                 "--batch", "1,64", "--weights", "all=nvfp4"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "MoE DP gather + scatter" in x)
    assert "MAX_LEN" in line.split("│")[3] and "MAX_LEN" in line.split("│")[4]  # each column labelled with its own
    assert main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--batch", "1",
                 "--weights", "experts=nvfp4,rest=bf16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["bound"] == "memory"


# GLM-5 (DSA, MLA: 64 heads, kv_lora 512 + rope 64) at TP8 DCP2: 8 query heads a rank, 16 in the DCP group
HEADS, SCORE, VALUE = 8, 512 + 64, 512


@pytest.mark.parametrize("info, what, count, per_layer", [
    # 0.5.23 default on CUDA for a DSA model: a2a, and dcp_replicate_q_proj on (model_overrides/deepseek_v2.py:32):
    # one all-to-all of [2, b, 8 heads, 512 + 2] bf16, half of it leaving the rank
    ({"dcp_comm_backend": "a2a", "dcp_replicate_q_proj": True}, ["DCP output all-to-all (a2a)"], 78,
     1 / 2 * 2 * 4 * HEADS * (VALUE + 2) * 2),
    # --no-dcp-replicate-q-proj: the absorbed queries [8 heads, b, 576] bf16 all-gathered first
    ({"dcp_comm_backend": "a2a", "dcp_replicate_q_proj": False}, ["DCP query all-gather", "DCP output all-to-all (a2a)"],
     156, 1 / 2 * 2 * 4 * HEADS * SCORE * 2 + 1 / 2 * 2 * 4 * HEADS * (VALUE + 2) * 2),
    # ag_rs: query all-gather, the fp32 LSEs [b, 16] all-gathered, the fp32 outputs [16, b, 512] reduce-scattered
    ({"dcp_comm_backend": "ag_rs", "dcp_replicate_q_proj": False},
     ["DCP query all-gather", "DCP LSE all-gather + output reduce-scatter (fp32)"], 234,
     1 / 2 * 2 * 4 * HEADS * SCORE * 2 + 1 / 2 * 2 * 4 * 16 * 4 + 1 / 2 * 4 * 16 * VALUE * 4),
])
def test_dcp_exchange_of_partial_attention_outputs_is_priced(info, what, count, per_layer, capsys):
    """sglang 0.5.23's DCP (layers/dcp/comm.py) merges each layer's partial attention outputs across the DCP
    group; the roofline used to count DCP's KV split and none of this traffic (b=4, no TP all-reduce left out)."""
    base = {"tp_size": 8, "dcp_size": 2}
    kw, text = roofline_layout({**base, **info})
    assert f"DCP exchange {info['dcp_comm_backend']}" in text
    kw = {k: v for k, v in kw.items() if k != "tp"}
    ar = _comm(4, weights="experts=nvfp4,rest=bf16", **kw).allreduce  # the checkpoint's bf16 attention
    dcp = [p for p in ar.parts if p[0].startswith("DCP")]
    assert [p[0] for p in dcp] == what
    assert sum(p[1] for p in dcp) == count and sum(p[2] for p in dcp) == pytest.approx(78 * per_layer)
    assert ar.bytes_per_gpu == pytest.approx(156 * 2 * 7 / 8 * 4 * ROW + 78 * per_layer)
    assert main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--dcp", "2", "--batch", "4",
                 "--weights", "experts=nvfp4,rest=bf16", "--json", "--dcp-comm-backend", info["dcp_comm_backend"],
                 "--dcp-replicate-q-proj" if info["dcp_replicate_q_proj"] else "--no-dcp-replicate-q-proj"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rows"][0]["allreduce"]["bytes_per_gpu"] == pytest.approx(ar.bytes_per_gpu)
    assert any("per layer the group exchanges" in line for line in data["assumptions"])


def test_dcp_defaults_follow_sglang_and_gqa_uses_the_triton_merge():
    # the CLI's defaults for a DSA model: a2a with the query projection replicated, no query all-gather
    glm = _comm(1, weights="experts=nvfp4,rest=bf16", dcp=2).allreduce.parts
    assert [p[0] for p in glm if p[0].startswith("DCP")] == ["DCP output all-to-all (a2a)"]
    # GQA (Llama-3.1-8B: 32 heads of 128 at TP8: 4 a rank) always gathers queries and all-reduces fp32 outputs
    gqa = roofline(make_inputs("llama-3.1-8b", "rtx-pro-6000", tp=8, dcp=2, batches=(1,))).rows[0].allreduce.parts
    dcp = {p[0]: p[2] for p in gqa if p[0].startswith("DCP")}
    assert dcp == pytest.approx({"DCP query all-gather": 32 * 1 / 2 * 2 * 4 * 128 * 2,
                                 "DCP LSE all-gather + output all-reduce (fp32)": 32 * (1 / 2 * 2 * 8 * 4 + 8 * 128 * 4)})
    with pytest.raises(Exception, match="unknown DCP communication backend"):
        _comm(1, dcp=2, dcp_comm="nccl")


def test_cp_decode_attention_tp_slices_attention_weights_and_dwdp_is_refused_with_its_reason(capsys):
    """sglang 0.5.23's enable_cp_decode_attn_tp (layers/cp/cp_decode_attn_tp.py, models/deepseek_v2.py:2265-2289)
    slices GLM-5's q_b_proj, w_kc/w_vc and o_proj over the CP ranks at decode, o_proj all-reducing over them: the
    roofline read those weights whole on every CP rank. dwdp_size re-fetches remote experts each decode step
    (arg_groups/parallel_hook.py:459-464): refused with that reason rather than priced as plain TP."""
    info = {"tp_size": 8, "attn_cp_size": 8, "moe_dp_size": 1, "enable_cp_decode_attn_tp": True}
    kw, text = roofline_layout(info)
    assert kw["cp_attn_tp"] is True and "attn-CP8" in text and "CP decode attention TP" in text
    kw = {k: v for k, v in kw.items() if k != "tp"}
    on, off = _comm(1, **kw), _comm(1, **{**kw, "cp_attn_tp": False})
    glm = on.component("attention").bytes
    m = make_inputs("glm-5", "rtx-pro-6000").model
    sharded, replicated = 78 * m.attn_sharded * 0.5625, 78 * m.attn_replicated * 0.5625  # all=nvfp4
    assert off.component("attention").bytes == pytest.approx(sharded + replicated)  # attention TP 1: all of it
    assert glm == pytest.approx(sharded / 8 + replicated)
    assert [p[0] for p in on.allreduce.parts][0] == "attention all-reduce"
    assert on.allreduce.parts[0][1:] == (78, pytest.approx(78 * 2 * 7 / 8 * ROW))
    assert "attention all-reduce" not in [p[0] for p in off.allreduce.parts]
    assert main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--attn-cp", "8",
                 "--cp-decode-attn-tp", "--batch", "1", "--weights", "all=nvfp4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["cp_decode_attn_tp"] == 8 and data["rows"][0]["step_s"] == pytest.approx(on.step_s)
    assert main(["roofline", "--model", "llama-3.1-8b", "--gpu", "rtx-pro-6000", "--tp", "8", "--attn-cp", "2",
                 "--cp-decode-attn-tp"]) == 2
    assert "MLA models only" in capsys.readouterr().err
    kw, text = roofline_layout({"tp_size": 8, "dwdp_size": 8, "attn_dp_size": 8, "ep_size": 8})
    assert "DWDP8" in text
    with pytest.raises(Exception, match="DWDP \\(dwdp_size 8\\) is not modelled") as exc:
        theoretical_tok_s("glm-5", "rtx-pro-6000", batch=1, context=0, weights="all=nvfp4", **kw)
    assert "re-fetches every remote expert" in exc.value.hint


def test_attention_dp_lm_head_gathers_every_ranks_rows_unless_dp_lm_head(capsys):
    """Under attention DP without enable_dp_lm_head, sglang 0.5.23 all-reduces every DP rank's last hidden states
    (bf16) into one buffer over TP before lm_head (logits_processor.py:483-489, :1216-1242 -> dp_attention.py:1065,
    :661-713), every rank padded to the CUDA graph's batch (decode_cuda_graph_runner.py:740-745, :1154-1162), and
    runs lm_head on all of them against its vocab/TP shard; enable_dp_lm_head splits the vocab over attention TP
    (vocab_parallel_embedding.py:258-263) and runs the rank's own rows: no gather. GLM-5 TP8 attention DP8, b=1."""
    vocab_hidden = 154880 * 6144
    base = {**FP4_INFO, "moe_runner_backend": "auto", "quantization": None}  # attention DP8, no FP4 all-gather
    kw, _ = roofline_layout(base)
    row = _comm(1, **{k: v for k, v in kw.items() if k != "tp"})
    gather = [p for p in row.allreduce.parts if p[0] == "lm_head DP gather (all-reduce)"]
    assert gather == [("lm_head DP gather (all-reduce)", 1, pytest.approx(2 * 7 / 8 * 8 * ROW))]  # 172,032 B
    i = row.allreduce.parts.index(gather[0])
    assert row.allreduce.part_time_s(i) == pytest.approx(10e-6 + 172032 / 64e9)
    assert row.component("lm_head").flops == pytest.approx(2 * 8 * vocab_hidden / 8)  # 8 padded rows, 1/8 vocab
    kw, _ = roofline_layout({**base, "enable_dp_lm_head": True})
    own = _comm(1, **{k: v for k, v in kw.items() if k != "tp"})
    assert not [p for p in own.allreduce.parts if p[0].startswith("lm_head")]
    assert own.component("lm_head").bytes == pytest.approx(vocab_hidden * 0.5625)  # whole vocab (attention TP 1)
    assert own.component("lm_head").flops == pytest.approx(2 * 1 * vocab_hidden)  # its own row
    assert main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--ep", "8", "--attn-dp", "8",
                 "--batch", "1", "--weights", "all=nvfp4"]) == 0
    out = capsys.readouterr().out
    assert "lm_head DP gather (all-reduce)" in out and "last hidden states gathered by one all-reduce" in out


def test_dcp_replicated_query_projection_reads_the_groups_head_shards(capsys):
    """sglang 0.5.23's dcp_replicate_q_proj (on by default for a DSA model under a2a, arg_groups/model_overrides/
    deepseek_v2.py:32-33) all-gathers each DCP rank's q_b_proj and w_kc head shard at load (model_executor/
    model_runner.py:1133-1163) and projects the group's heads locally at decode (forward_mla.py:327-336, :401-403,
    :503-506): the query all-gather is gone, but every rank reads DCP x its shards. GLM-5 (q_lora 2048, 64 heads,
    qk 192 + 64, kv_lora 512) at TP8 DCP2: + 78 x (2048 x 64 x 256 + 512 x 64 x 192) / 8 = 388,497,408 params a GPU."""
    extra = 78 * (2048 * 64 * 256 + 512 * 64 * 192) / 8
    assert extra == 388_497_408
    w = "experts=nvfp4,rest=bf16"
    gathered = roofline(make_inputs("glm-5", "rtx-pro-6000", tp=8, dcp=2, dcp_replicate_q=False, weights=w)).rows[0]
    replicated = roofline(make_inputs("glm-5", "rtx-pro-6000", tp=8, dcp=2, dcp_replicate_q=True, weights=w)).rows[0]
    attn_g, attn_r = gathered.component("attention"), replicated.component("attention")
    assert attn_r.bytes - attn_g.bytes == pytest.approx(2 * extra)  # bf16 attention
    assert attn_r.flops - attn_g.flops == pytest.approx(2 * extra)  # b=1: 2 FLOPs a weight
    assert [p[0] for p in replicated.allreduce.parts if p[0].startswith("DCP")] == ["DCP output all-to-all (a2a)"]
    # GQA has no such projection: --dcp-replicate-q-proj changes nothing there
    gqa = [roofline(make_inputs("llama-3.1-8b", "rtx-pro-6000", tp=8, dcp=2, dcp_replicate_q=r)).rows[0].weight_bytes
           for r in (False, True)]
    assert gqa[0] == gqa[1]
    assert main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--dcp", "2",
                 "--weights", w, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    attn = next(c for c in data["rows"][0]["components"] if c["name"] == "attention")
    assert attn["bytes"] == pytest.approx(attn_r.bytes)  # the CLI's default for GLM-5 under a2a: replicated
    assert any("reading 2 head shards of q_b_proj and w_kc, counted in attention" in a for a in data["assumptions"])


@pytest.mark.parametrize("b, rows", [(1, 8), (8, 8), (9, 16), (64, 64)])
def test_fp4_allgather_moves_every_ranks_padded_rows(b, rows):
    """sglang 0.5.23's FP4 all-gather passes the per-rank counts as padded for the gather (token_dispatcher/
    standard.py:177-210 all_gatherv(sizes=get_dp_global_num_tokens())): at a CUDA-graph decode step every rank
    runs the captured batch of the busiest rank (decode_cuda_graph_runner.py:1623-1626, :740-745), so GLM-5 at TP8
    EP8 attention DP8 gathers 8 x ceil(b / 8) rows, not b: at b=1 eight (the roofline priced one)."""
    kw = {k: v for k, v in roofline_layout(FP4_INFO)[0].items() if k != "tp"}
    part = next(p for p in _comm(b, **kw).allreduce.parts if p[0].startswith("MoE FP4"))
    per_row = 7 / 8 * (6144 * 0.5625 + 8 * 8) + 7 / 8 * ROW  # nvfp4 + scales + top-8 weights/ids out, bf16 back
    assert part == ("MoE FP4 all-gather (nvfp4) + reduce-scatter (bf16)", 150, pytest.approx(75 * rows * per_row))


@pytest.mark.parametrize("b, rows", [(1, 8), (9, 16), (16, 16)])
def test_attention_dp_gather_moves_the_cuda_graphs_padded_rows(b, rows):
    """At a CUDA-graph decode step sglang 0.5.23 runs every attention-DP rank at the busiest rank's captured batch
    (decode_cuda_graph_runner.py:1623-1626, :740-745), so the MoE's DP gather moves 8 x ceil(b / 8) rows whichever
    mode it takes; it was priced as SUM_LEN's two all-reduces of the b unpadded rows (an eager step's), which made
    the bf16 gather look cheaper than the FP4 all-gather at b=1. GLM-5 TP8 attention DP8: MAX_LEN's AG + RS."""
    part = next(p for p in _comm(b, attn_dp=8).allreduce.parts if p[0].startswith("MoE DP gather"))
    assert part == ("MoE DP gather + scatter (MAX_LEN)", 150, pytest.approx(75 * 2 * 7 / 8 * rows * ROW))
    fp4 = {k: v for k, v in roofline_layout(FP4_INFO)[0].items() if k != "tp"}
    assert _comm(b, **fp4).allreduce.time_s < _comm(b, **{**fp4, "fp4_allgather": False}).allreduce.time_s


@pytest.mark.parametrize("weights, gathered", [
    ("experts=nvfp4,rest=bf16", False), ("all=fp8", False), ("all=nvfp4", True), ("all=mxfp4", True),
    ("all=fp32", True)])
def test_dcp_replicate_q_proj_applies_only_to_the_projections_sglang_gathers(weights, gathered, capsys):
    """sglang 0.5.23 replicates a layer's query projection only when q_b_proj is unquantized 16-bit or block FP8 and
    w_kc is 16-bit (model_executor/model_runner.py:1146-1157: 'skipping unsupported q-proj' / 'non-16-bit w_kc'; an
    FP8 checkpoint's w_kc is dequantized to bf16, deepseek_weight_loader.py:690-707); a skipped layer keeps the query
    all-gather (forward_mla.py:327-336, :666-671). GLM-5 TP8 DCP2 a2a (the DSA default: replicate on)."""
    row = _comm(4, weights=weights, dcp=2)
    names = [p[0] for p in row.allreduce.parts if p[0].startswith("DCP")]
    assert names == (["DCP query all-gather"] if gathered else []) + ["DCP output all-to-all (a2a)"]
    no_rep = _comm(4, weights=weights, dcp=2, dcp_replicate_q=False)
    extra = row.component("attention").bytes - no_rep.component("attention").bytes
    assert (extra == 0) == gathered  # replicated shards are read only where sglang replicates
    assert main(["roofline", "--model", "glm-5", "--gpu", "rtx-pro-6000", "--tp", "8", "--dcp", "2",
                 "--weights", weights, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dcp_q_gathered"] is gathered
    assert any(("dcp_replicate_q_proj skips" in a) == gathered for a in data["assumptions"] if a.startswith("DCP=2"))
