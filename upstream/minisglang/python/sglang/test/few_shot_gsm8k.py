"""The miniature's few-shot GSM-8K evaluation, with sglang's command line and output.

    python -m sglang.test.few_shot_gsm8k --num-questions 200 --data-path test.jsonl \
        --host 127.0.0.1 --port 30000

Reads GSM-8K test lines (`{"question": ..., "answer": "... #### 42"}`) from `--data-path` (the
miniature never downloads: a missing file exits 1), builds `--num-shots`-shot prompts from the first
lines, asks the server's `/generate` (temperature 0, `--max-new-tokens`, stop strings as sglang
sends them) with `--parallel` requests in flight, takes each answer's last number as its
prediction, and prints `Accuracy: X`, `Invalid: X`, `Latency: X s`, `Output throughput: X token/s`,
then writes every question's text to `tmp_output_gsm8k.txt` in the working directory, one
`==== i ====`-framed block each, as sglang's dump does. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

INVALID = -9999999


def example(line: dict, with_answer: bool) -> str:
    text = "Question: " + line["question"] + "\nAnswer:"
    return text + " " + line["answer"] if with_answer else text


def answer_value(text: str):
    numbers = re.findall(r"\d+", text.replace(",", ""))
    return int(numbers[-1]) if numbers else INVALID


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--num-shots", type=int, default=5)
    ap.add_argument("--data-path", type=str, default="test.jsonl")
    ap.add_argument("--num-questions", type=int, default=200)
    ap.add_argument("--max-new-tokens", type=int, default=512)
    ap.add_argument("--parallel", type=int, default=128)
    ap.add_argument("--host", type=str, default="127.0.0.1")  # 0.5.23: a bare host (older: with http://)
    ap.add_argument("--port", type=int, default=30000)
    args = ap.parse_args(argv)
    try:
        with open(args.data_path) as fh:
            lines = [json.loads(ln) for ln in fh if ln.strip() and not ln.startswith("#")]
    except OSError as exc:
        print(f"cannot read {args.data_path}: {exc} (the miniature does not download)", file=sys.stderr)
        return 1
    shots = "".join(example(lines[i], True) + "\n\n" for i in range(min(args.num_shots, len(lines))))
    questions = lines[: args.num_questions]
    labels = [answer_value(q["answer"]) for q in questions]
    host = args.host if "://" in args.host else f"http://{args.host}"
    url = f"{host}:{args.port}/generate"

    def ask(q: dict) -> dict:
        body = {"text": shots + example(q, False), "sampling_params": {
            "temperature": 0, "max_new_tokens": args.max_new_tokens,
            "stop": ["Question", "Assistant:", "<|separator|>"]}}
        req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as resp:
            return json.loads(resp.read())

    tic = time.time()
    with ThreadPoolExecutor(max(1, args.parallel)) as pool:
        outs = list(pool.map(ask, questions))
    latency = time.time() - tic
    preds = [answer_value(o["text"]) for o in outs]
    acc = sum(p == lab for p, lab in zip(preds, labels)) / len(labels) if labels else 0.0
    invalid = sum(p == INVALID for p in preds) / len(preds) if preds else 0.0
    tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
    print(f"Accuracy: {acc:.3f}")
    print(f"Invalid: {invalid:.3f}")
    print(f"Latency: {latency:.3f} s")
    print(f"Output throughput: {tokens / latency if latency else 0.0:.3f} token/s")
    with open("tmp_output_gsm8k.txt", "w") as fout:
        for i, (q, o) in enumerate(zip(questions, outs)):
            text = shots + example(q, False) + o["text"]
            fout.write("=" * 40 + f" {i} " + "=" * 40 + "\n" + text + "\n" + "=" * 80 + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
