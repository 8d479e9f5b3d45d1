"""The static check for a declared target, with the miniature's real ServerArgs in a real process:
resolution runs and is reported, a refusal is a one-line BadInput quoting the upstream message, the
resolved config is summarised, diffed between recipes and checked against /server_info."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from toolkit.errors import BadInput
from toolkit.recipe.load import load_recipe
from toolkit.run.sglang_args import (check_summary, diff_resolved, key_resolved, static_check, verify_resolved)
from toolkit.recipe.spec import ServerSpec, TargetSpec
from toolkit.recipe.target import target_facts

MINI = Path(__file__).resolve().parent.parent / "upstream" / "minisglang" / "python"
ENVIRON = {**os.environ, "PYTHONPATH": str(MINI)}


def check(args: dict, target=TargetSpec("rtx-pro-6000", 8)):
    server = ServerSpec(model="minisglang/tiny", args=tuple(args.items()))
    return static_check(Path(sys.executable), server, {}, environ=ENVIRON, device="cuda",
                        target=target_facts(target) if target else None)


def test_target_facts_are_the_devices_own_answers():
    facts = target_facts(TargetSpec("RTX PRO 6000", 8))  # aliases work as in the roofline
    assert facts["key"] == "rtx-pro-6000" and facts["capability"] == [12, 0]
    assert facts["memory_mib"] == 97887 and facts["count"] == 8
    with pytest.raises(BadInput, match="unknown GPU"):
        target_facts(TargetSpec("rtx-9999", 1))


def test_resolution_runs_and_the_key_fields_are_reported():
    c = check({"tp-size": 8, "random-seed": 0})
    assert c.ok and c.resolved and c.note is None
    assert c.target["name"].startswith("NVIDIA RTX PRO 6000")
    key = key_resolved(c)
    assert key["attention_backend"] == "flashinfer" and key["chunked_prefill_size"] == 8192
    assert key["tp_size"] == 8 and key["mem_fraction_static"] == 0.85
    assert "port" not in key and "random_seed" not in key  # per-launch values are not the config
    text = "\n".join(check_summary(c))
    assert "target: 8 x NVIDIA RTX PRO 6000" in text and "compute capability 12.0" in text
    assert "attention_backend" in text and "flashinfer" in text


def test_upstream_refusal_is_bad_input_quoting_its_message():
    with pytest.raises(BadInput) as exc:
        check({"stream-interval": 0})
    assert "refuses the configuration: ValueError: stream_interval must be >= 1" in str(exc.value)
    assert "sglang/srt/server_args.py" in str(exc.value)  # where upstream raised it


def test_resolved_config_is_diffed_and_checked_against_server_info():
    a, b = check({"tp-size": 8}), check({"tp-size": 2})
    rows = dict(diff_resolved({"a": a.resolved_config, "b": b.resolved_config}))
    assert rows["tp_size"] == ["8", "2"]
    assert rows["mem_fraction_static"] == ["0.85", "0.88"]
    assert "attention_backend" not in rows
    info = {**a.resolved_config, "port": 1234, "random_seed": 99}
    assert verify_resolved(a, info) == []
    problems = verify_resolved(a, {**info, "attention_backend": "triton"})
    assert problems == ["attention_backend: expected 'flashinfer', /server_info (resolved statically for the "
                        "target) says 'triton'"]


def test_recipe_target_table(tmp_path):
    (tmp_path / "recipes").mkdir()
    path = tmp_path / "recipes" / "t.toml"
    path.write_text('[target]\ngpu = "h100"\ncount = "${NGPU:-4}"\n')
    assert load_recipe(path).target == TargetSpec("h100", 4)
    path.write_text('[target]\ncount = 4\n')
    with pytest.raises(BadInput, match="`target` needs `gpu`"):
        load_recipe(path)
    path.write_text('[target]\ngpu = "h100"\ncount = 0\n')
    with pytest.raises(BadInput, match="positive integer"):
        load_recipe(path)
    path.write_text('[target]\ngpu = "h100"\nstrict = true\n')
    assert load_recipe(path).target == TargetSpec("h100", 1, strict=True)
    path.write_text('[target]\ngpu = "h100"\nstrict = "yes"\n')
    with pytest.raises(BadInput, match="strict"):
        load_recipe(path)
    path.write_text('[target]\ngpu = "h100"\ncuont = 4\n')
    with pytest.raises(BadInput, match="did you mean `count`"):
        load_recipe(path)


def test_a_flag_sglang_moves_to_another_field_is_expected_there():
    """sglang 0.5.23 turns the deprecated `--dp-size 8 --enable-dp-attention` into attn_dp_size = 8,
    dp_size = 1 (its parallel_hook): the check expects the value where sglang put it, says so, and a
    dp_size that went nowhere stays a mismatch."""
    from toolkit.run.sglang_args import compare_fields, follow_moves

    implied = {"dp_size": 8, "enable_dp_attention": True}
    fields = {"dp_size": 1, "attn_dp_size": 8, "enable_dp_attention": True}
    expected, notes = follow_moves(implied, fields, "0.5.23")
    assert expected == {"dp_size": 1, "attn_dp_size": 8, "enable_dp_attention": True}
    assert compare_fields(expected, fields, source="sglang 0.5.23 parser") == []
    assert notes == ["sglang 0.5.23 reads --dp-size 8 as attn_dp_size = 8 (dp_size = 1): the launched server is "
                     "checked for that"]
    # the prefill chunk each attention-DP rank takes: 4096 // 8 (_handle_data_parallelism)
    expected, notes = follow_moves({**implied, "chunked_prefill_size": 4096}, {**fields, "chunked_prefill_size": 512},
                                   "0.5.23")
    assert expected["chunked_prefill_size"] == 512 and notes[1] == (
        "sglang 0.5.23 gives each of the 8 attention-DP ranks --chunked-prefill-size 4096 // 8 = 512: the "
        "launched server is checked for that")
    kept, _ = follow_moves({"attn_dp_size": 8, "chunked_prefill_size": 4096}, {"attn_dp_size": 8,
                                                                               "chunked_prefill_size": 1000}, "x")
    assert kept["chunked_prefill_size"] == 4096  # changed some other way: still held against the parser
    # dp_size 8 without attention DP: nothing moved, a parser that kept 1 is still a mismatch
    dropped, notes = follow_moves({"dp_size": 8}, {"dp_size": 1, "attn_dp_size": 1}, "0.5.23")
    assert dropped == {"dp_size": 8} and not notes
    assert compare_fields(dropped, {"dp_size": 1}, source="/server_info")


def test_the_negative_half_of_a_boolean_flag_pair_expects_its_field_false():
    """sglang 0.5.23 declares 13 flags as argparse BooleanOptionalAction pairs: `--no-dllm-fdfo` writes
    dllm_fdfo = False (its parser's dests map both spellings to the field, as the probe reports them).
    A recipe's `no-dllm-fdfo = true` was expected to give dllm_fdfo == True, so the static check
    refused a flag sglang accepts ("expected True, sglang 0.5.23 parser says False", seen with
    `no-enable-fused-qk-norm-rope`); now it expects False, and a server still at the default (True, as
    the real /server_info below) is the mismatch."""
    import json

    from toolkit.run.sglang_args import compare_fields, implied_expectations

    dests = {"--dllm-fdfo": "dllm_fdfo", "--no-dllm-fdfo": "dllm_fdfo",  # sglang 0.5.23's parser
             "--enable-tf32-matmul": "enable_tf32_matmul", "--no-enable-tf32-matmul": "enable_tf32_matmul",
             "--no-ops": "no_ops", "--disable-radix-cache": "disable_radix_cache"}
    real = json.loads((Path(__file__).parent / "data/sglang-0.5.23-cpu-server-info.json").read_text())["server_info"]
    assert real["dllm_fdfo"] is True  # its default
    server = ServerSpec(args=(("no-dllm-fdfo", True), ("no-enable-tf32-matmul", False), ("no-ops", True),
                              ("disable-radix-cache", True)))
    implied = implied_expectations(server, dests, {"dllm_fdfo": False, "enable_tf32_matmul": None})
    # `no-enable-tf32-matmul = false` omits the flag: nothing said; `--no-ops` has no positive twin: a plain flag
    assert implied == {"dllm_fdfo": False, "no_ops": True, "disable_radix_cache": True}
    assert compare_fields({"dllm_fdfo": False}, {"dllm_fdfo": False}, source="sglang 0.5.23 parser") == []
    assert compare_fields({"dllm_fdfo": False}, real, source="/server_info") == [
        "dllm_fdfo: expected False, /server_info says True"]


@pytest.mark.parametrize("args", [{"tp-size": 8, "dp-size": 8, "enable-dp-attention": True, "chunked-prefill-size": 4096},
                                  {"tp-size": 8, "attn-dp-size": 8, "chunked-prefill-size": 4096}])
def test_attention_dp_resolves_in_the_miniature_as_in_sglang_0_5_23(args):
    """The miniature resolves attention DP as 0.5.23 does (its real parser: test_static_target_sglang):
    either spelling is attn_dp_size 8, dp_size 1, enable_dp_attention read true, a chunk of 4096 // 8
    a rank; the check passes on it and says what sglang moved."""
    c = check(args)
    assert c.ok, c.problems
    assert {k: c.fields[k] for k in ("attn_dp_size", "dp_size", "enable_dp_attention", "chunked_prefill_size")} == \
        {"attn_dp_size": 8, "dp_size": 1, "enable_dp_attention": True, "chunked_prefill_size": 512}
    assert any("4096 // 8 = 512" in w for w in c.warnings)


def test_dp_attention_flag_alone_is_a_mismatch_sglang_0_5_23_would_show():
    """`--enable-dp-attention` without a width does nothing in 0.5.23 (attn_dp_size stays 1, the field
    reads false): the check says the flag did not take, as it says of an `--ep-size` that did not."""
    c = check({"tp-size": 8, "enable-dp-attention": True})
    assert not c.ok and any("enable_dp_attention: expected True" in p for p in c.problems)


def test_an_inherited_expect_that_the_recipes_own_flags_contradict_is_named():
    """A child recipe that changes a flag but inherits its parent's [expect] of the old value: the
    check says the recipe contradicts itself, not only that the parser disagrees."""
    server = ServerSpec(model="minisglang/tiny", args=(("tp-size", 2),))
    c = static_check(Path(sys.executable), server, {"tp_size": 1}, environ=ENVIRON, device="cuda", target=None)
    assert not c.ok
    assert "tp_size: expected 1, sglang 0.0.1+mini parser says 2" in c.problems
    assert "tp_size: [expect] says 1 but the recipe's [server.args] give 2 (an inherited [expect]? `patchbench " \
           "show RECIPE` names the file that set it)" in c.problems
