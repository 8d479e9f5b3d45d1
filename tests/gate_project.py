"""The gate tier's scratch project, shared by the tests that run it: the miniature demo with a
4-prompt answers file, GSM8K-shaped questions written here (not GSM8K's text), and the recipe block
of a one-point, one-repeat benchmark with the gsm8k evaluation."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import demo_project

# a recipe's [benchmark] and [quality] (append more [quality] keys after it)
GATE_BLOCK = """\
[benchmark]
concurrency = [1]
num_prompts = 2
output_len = 4
warmup = 0
repeats = 1
[quality]
prompts = "prompts4.jsonl"
max_tokens = 4
eval = "gsm8k"
eval_questions = 10
"""


def gsm8k_lines(n: int) -> str:
    """n GSM8K-shaped questions with their `#### N` answers."""
    return "".join(json.dumps({"question": f"Ann has {i} apples and buys {i + 3} more. How many apples does she have?",
                               "answer": f"She has {i} + {i + 3} = {2 * i + 3} apples.\n#### {2 * i + 3}"}) + "\n"
                   for i in range(1, n + 1))


def gate_project(tmp_path, monkeypatch, questions: int = 10) -> Path:
    """The demo project's recipes/demo, with gsm10.jsonl (`questions` lines) and prompts4.jsonl."""
    demo = demo_project(tmp_path, monkeypatch) / "recipes" / "demo"
    (demo / "gsm10.jsonl").write_text(gsm8k_lines(questions))
    (demo / "prompts4.jsonl").write_text("".join(json.dumps({"prompt": f"say {w}"}) + "\n"
                                                 for w in ("one", "two", "three", "four")))
    return demo
