"""The gate tier through the sgl-eval harness (`[quality] eval_harness = "sgl-eval"`): sglang's
accuracy harness (PyPI `sgl-eval`, where sglang 0.5.23's deprecated `sglang.test.few_shot_gsm8k`
points), against the live server's OpenAI chat API (`/v1/models`, `/v1/chat/completions`).

Effects: the harness's own env (`toolkit.envs.tool_env`: `PATCHBENCH_HOME/tools/sgl-eval-0.1.3`, or
`$PATCHBENCH_SGL_EVAL_ENV`), created once; never patchbench's process, never the recipe's env (the
env's sglang does not install it). In the run's `eval/`: `dataset.jsonl` (the recipe's GSM8K-format
questions in the harness's own shape, `{id, problem, expected_answer}`), the harness's run folder
(`sgl_eval_gsm8k_<stamp>/`: `metrics.json`, `output-rs0.jsonl`); its output goes to `eval.log`.

Run greedy (`--temperature 0 --seed 0`) with `--from-dataset`, so it never downloads a dataset.
Parsed: the accuracy (`aggregate.score` of metrics.json) and each question's `symbolic_correct`
from its predictions (written as answers arrive; ordered here by question). A request the harness
gave up on (its `error_rate`), a partial run or a missing question is a failed evaluation, never a
wrong answer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from toolkit.envs.tool_env import ToolEnv
from toolkit.errors import PatchbenchError
from toolkit.run import supervisor

HARNESS = "sgl-eval"
SGL_EVAL = "sgl-eval==0.1.3"
SGL_EVAL_ENV = ToolEnv("sgl-eval", SGL_EVAL, "sgl-eval-0.1.3", "PATCHBENCH_SGL_EVAL_ENV")
BENCHMARKS = {"gsm8k": "gsm8k"}  # the recipe's `eval` -> the harness's benchmark name
_ID = "q{}"


def ensure_env(home: Path, console=None) -> Path:
    """The harness's `sgl-eval` command, its env created on first use."""
    return SGL_EVAL_ENV.ensure(home, console).parent / "sgl-eval"


def write_dataset(rows: list[tuple[str, str]], path: Path) -> None:
    """(question, GSM8K answer text) rows -> the harness's jsonl; the label is what follows `####`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for i, (question, answer) in enumerate(rows):
            label = answer.rsplit("####", 1)[-1].strip().replace(",", "")
            fh.write(json.dumps({"id": _ID.format(i), "problem": question, "expected_answer": label}) + "\n")


def parse(out_dir: Path, questions: int) -> tuple[float, list[int]]:
    """(accuracy, per-question correctness) from the harness's run folder in `out_dir`;
    PatchbenchError for anything it wrote that cannot be read (the run keeps its speed numbers)."""
    try:
        return _parse(out_dir, questions)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PatchbenchError(f"sgl-eval's output under {out_dir} cannot be read: {type(exc).__name__}: {exc}") from None


def _parse(out_dir: Path, questions: int) -> tuple[float, list[int]]:
    runs = sorted(out_dir.glob("sgl_eval_*/metrics.json"))
    if not runs:
        raise PatchbenchError(f"sgl-eval wrote no metrics.json under {out_dir}")
    metrics = json.loads(runs[-1].read_text())
    agg = metrics.get("aggregate") or {}
    if metrics.get("partial"):
        raise PatchbenchError(f"sgl-eval stopped early: {metrics.get('completed_samples')} of {questions} answers")
    if agg.get("error_rate"):
        raise PatchbenchError(f"sgl-eval: {agg['error_rate']:.0%} of the requests failed (see eval.log)")
    by_id = {}
    for line in (runs[-1].parent / "output-rs0.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            pred = json.loads(line)
            by_id[pred["id"]] = int(bool(pred.get("symbolic_correct")))
    missing = [i for i in range(questions) if _ID.format(i) not in by_id]
    if missing:
        raise PatchbenchError(f"sgl-eval has no prediction for {len(missing)} of {questions} questions")
    return float(agg["score"]), [by_id[_ID.format(i)] for i in range(questions)]


def environ(host: str) -> dict:
    """The harness's environment: patchbench's, without any interpreter settings meant for
    another env, offline for Hugging Face, and the server's host never sent through a proxy."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    no_proxy = ",".join(filter(None, (env.get("NO_PROXY") or env.get("no_proxy"), host, "127.0.0.1", "localhost")))
    return {**env, "NO_PROXY": no_proxy, "no_proxy": no_proxy, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def evaluate(command: Path, name: str, rows: list[tuple[str, str]], *, workdir: Path, log: Path, host: str,
             port: int, timeout_s: float) -> tuple[float, list[int]]:
    """Run the harness's benchmark for `name` over `rows` against the server at host:port, in its
    own supervised process group, output appended to `log`. Returns (accuracy, per-question
    correctness); raises PatchbenchError when it fails (subprocess.TimeoutExpired past timeout_s)."""
    data = workdir / "dataset.jsonl"
    write_dataset(rows, data)
    argv = [str(command), "run", BENCHMARKS[name], "--base-url", f"http://{host}:{port}/v1",
            "--num-examples", str(len(rows)), "--from-dataset", str(data), "--temperature", "0", "--seed", "0",
            "--out-dir", str(workdir)]
    proc = supervisor.spawn(argv, log=log, environ=environ(host))
    try:
        code = proc.wait(timeout=timeout_s)
    finally:
        supervisor.stop_group(proc, grace=5.0)
    if code != 0:
        text = log.read_text(errors="replace")
        last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
        raise PatchbenchError(f"sgl-eval exited with code {code}: {last[:200]}")
    return parse(workdir, len(rows))
