"""patchbench writes its tiny models itself: the same bytes every time, cached once, never half-made."""

from __future__ import annotations

import json
import multiprocessing

import pytest

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from toolkit.errors import BadInput
from toolkit.models import tiny


def test_the_same_model_twice_is_the_same_bytes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    tiny.write("tiny-glm4-moe", a)
    tiny.write("tiny-glm4-moe", b)
    assert (a / "manifest.json").read_text() == (b / "manifest.json").read_text()
    files = json.loads((a / "manifest.json").read_text())["files"]
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(files)


def test_the_moe_routes_as_glm5_does():
    from safetensors.numpy import load_file  # noqa: F401 (the writer's own library)

    cfg = tiny.spec("tiny-glm4-moe")
    assert cfg["architectures"] == ["Glm4MoeForCausalLM"]
    assert cfg["n_group"] > 1 and cfg["topk_group"] < cfg["n_group"]  # the group selection acts
    w = tiny.weights(cfg)
    bias = w["model.layers.1.mlp.gate.e_score_correction_bias"]
    assert bias.shape == (cfg["n_routed_experts"],) and bias.std() > 0  # a correction bias that matters
    assert w["model.layers.0.mlp.experts.15.down_proj.weight"].shape == (cfg["hidden_size"],
                                                                          cfg["moe_intermediate_size"])


def test_the_tokenizer_is_trained_here_and_encodes_any_text(tmp_path):
    from tokenizers import Tokenizer

    tiny.write("tiny-llama", tmp_path)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    text = "What is 17 + 25? Ünïcode ✓"
    assert tok.decode(tok.encode(text).ids) == text
    assert tok.get_vocab_size() <= tiny.VOCAB
    assert tok.token_to_id("<|eos|>") == json.loads((tmp_path / "config.json").read_text())["eos_token_id"]


def _ensure(home):
    return str(tiny.ensure("tiny-llama", home))


def test_two_processes_writing_the_same_model_get_one_complete_copy(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        got = pool.map(_ensure, [tmp_path, tmp_path])
    assert got[0] == got[1]
    assert (tmp_path / "models").is_dir()
    entries = [p.name for p in (tmp_path / "models").iterdir() if not p.name.endswith(".lock")]
    assert entries == [got[0].rsplit("/", 1)[1]]  # no temporary directory left behind


def test_a_recipe_names_a_tiny_model_by_scheme(tmp_path):
    assert tiny.resolve("tiny:tiny-llama", tmp_path) == str(tiny.model_dir("tiny-llama", tmp_path))
    assert tiny.resolve("/models/GLM-5", tmp_path) == "/models/GLM-5"
    with pytest.raises(BadInput):
        tiny.resolve("tiny:nope", tmp_path)


def test_random_prompt_ids_stay_inside_a_tiny_models_vocab(tmp_path):
    from toolkit.run.bench.workload import DEFAULT_VOCAB, ServingConfig, make_prompt, model_vocab

    model = tiny.ensure("tiny-glm4-moe", tmp_path)
    vocab = model_vocab(str(model))
    assert vocab == tiny.VOCAB < DEFAULT_VOCAB
    cfg = ServingConfig(input_len=64, output_len=8, concurrency=(8,), vocab_size=vocab)
    ids = [i for n in range(16) for i in make_prompt("input_ids", cfg, 8, n)]
    assert 0 < min(ids) and max(ids) < vocab
    # a model with a larger vocab, or none readable, keeps the prompts every earlier run used
    assert model_vocab("/models/GLM-5-NVFP4") == DEFAULT_VOCAB
    big = ServingConfig(input_len=8, output_len=8, concurrency=(1,))
    assert make_prompt("input_ids", big, 1, 0) == make_prompt(
        "input_ids", ServingConfig(input_len=8, output_len=8, concurrency=(1,), vocab_size=DEFAULT_VOCAB), 1, 0)


def test_the_vocab_takes_sglangs_one_batch_ids_and_greedy_picks_a_written_token(tmp_path):
    """sglang 0.5.23's static-batch benchmark prompts with random ids below 10,000 (its warmup always
    does); lm_head rows past the tokenizer are zero, so the argmax is a token the tokenizer writes."""
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    tiny.write("tiny-llama", tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["vocab_size"] >= 10_000
    n = Tokenizer.from_file(str(tmp_path / "tokenizer.json")).get_vocab_size()
    head = load_file(str(tmp_path / "model.safetensors"))["lm_head.weight"]
    assert head.shape[0] == cfg["vocab_size"] > n
    assert not head[n:].any() and head[:n].any(axis=1).all()


def test_home_flag_places_a_recipes_tiny_model_in_that_workspace(tmp_path, monkeypatch, capsys):
    from conftest import REPO_ROOT
    from toolkit.cli import main

    monkeypatch.setenv("PATCHBENCH_HOME", str(tmp_path / "env-home"))
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(REPO_ROOT / "recipes"))
    assert main(["show", "cpu/baseline", "--home", str(tmp_path / "flag-home")]) == 0
    assert list((tmp_path / "flag-home" / "models").glob("tiny-glm4-moe-*/manifest.json"))
    assert not (tmp_path / "env-home" / "models").exists()
    import os
    assert os.environ["PATCHBENCH_HOME"] == str(tmp_path / "env-home")  # restored after the command
