"""The quality gate tier: sglang's own evaluation against the live server, in the same launch after
the output check (`[quality] eval = "gsm8k"`). Effects: one supervised process of the env's
interpreter (or, with `eval_harness = "sgl-eval"`, of the sgl-eval harness in its own env:
toolkit.run.sgl_eval), `eval/` and `eval.log` in the run's directory, `extra["quality"]["eval"]`
(`harness`, `module`: what ran), a run-level `eval_accuracy` sample.

The entry point is probed in the env, never assumed from a version: `sglang.test.few_shot_gsm8k`
(0.5.23 marks it deprecated for `sgl-eval`, still ships it). It gets `--num-questions`,
`--data-path` (the recipe's `dataset`, else `$PATCHBENCH_DATA/gsm8k/test.jsonl`; patchbench never
downloads: a missing file is a BadInput saying where to get it), `--host/--port` of the live
server, and runs in `eval/` so its dump (`tmp_output_gsm8k.txt`) lands there. Parsed: the printed
`Accuracy: X`, and from the dump each question's prediction (the last number after its last
"Answer:", sglang's rule) against its label: per-question correctness, what McNemar's test pairs
with the reference's (toolkit.analysis.gate_verdict). A failed evaluation is stored (`status: failed`, the
reason) and keeps the speed numbers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from rich.markup import escape

from toolkit.errors import BadInput, PatchbenchError
from toolkit.recipe.spec import QualitySpec
from toolkit.run import supervisor
from toolkit.run.env_module import first_module
from toolkit.run.bench import Sample

EVAL_MODULES = {"gsm8k": ("sglang.test.few_shot_gsm8k",)}
GSM8K_URL = "https://raw.githubusercontent.com/openai/grade-school-math/master/grade_school_math/data/test.jsonl"
DUMP = "tmp_output_gsm8k.txt"
_BLOCK = re.compile(r"^={40} (\d+) ={40}\n(.*?)\n={80}$", re.S | re.M)


def dataset_path(spec: QualitySpec) -> Path:
    """The evaluation's data file; BadInput (where to get it) when it is missing."""
    if spec.eval not in EVAL_MODULES:
        raise BadInput(f"[quality] eval = {spec.eval!r}: patchbench runs {', '.join(EVAL_MODULES)}")
    data = os.environ.get("PATCHBENCH_DATA")
    path = spec.dataset or (Path(data).expanduser() / "gsm8k" / "test.jsonl" if data else None)
    if path is None or not Path(path).is_file():
        where = path or "$PATCHBENCH_DATA/gsm8k/test.jsonl"
        raise BadInput(f"[quality] eval = \"gsm8k\": no dataset at {where}",
                       hint=f"download {GSM8K_URL} to {where} (patchbench never downloads it), or set "
                            "[quality] dataset = \"PATH\" or $PATCHBENCH_DATA")
    return Path(path)


def prepare(spec: QualitySpec, home: Path, console=None) -> None:
    """Before the launch: the dataset is there and well-formed (a malformed line is bad input); the
    sgl-eval harness's env exists."""
    rows(dataset_path(spec))
    if spec.eval_harness == "sgl-eval":
        from toolkit.run import sgl_eval

        sgl_eval.ensure_env(home, console)


def answer_value(text: str) -> int | None:
    numbers = re.findall(r"\d+", text.replace(",", ""))
    return int(numbers[-1]) if numbers else None


def rows(path: Path) -> list[tuple[str, str]]:
    """(question, answer text) of each GSM8K line; BadInput naming the file and line otherwise."""
    out = []
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj["question"], str) or not isinstance(obj["answer"], str):
                raise TypeError
            out.append((obj["question"], obj["answer"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise BadInput(f"{path}:{no}: not a GSM8K line ({{\"question\": ..., \"answer\": \"... #### N\"}})") from None
    return out


def labels(path: Path) -> list[int]:
    return [answer_value(answer) for _, answer in rows(path)]


def find_module(python, environ: dict, name: str) -> str | None:
    """The module of evaluation `name` the env's sglang has (toolkit.run.env_module), else None."""
    return first_module(python, EVAL_MODULES[name], environ)


def host_arg(python, environ: dict, module: str, host: str) -> str:
    """`--host` as the module wants it: a bare host (0.5.23 builds the URL itself), or with http://
    where its default has the scheme (older releases). Read from the module's source, not run."""
    code = f"import importlib.util as u; print(u.find_spec({module!r}).origin)"
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=environ, timeout=120)
    try:
        source = Path(proc.stdout.strip()).read_text(errors="replace")
    except OSError:
        source = ""
    return f"http://{host}" if re.search(r"--host.*default=[\"']https?://", source) else host


def parse(log_text: str, dump: Path, truth: list[int]) -> tuple[float, list[int] | None]:
    """(accuracy printed by the harness, per-question correctness from its dump or None)."""
    m = re.findall(r"^Accuracy: ([0-9.]+)\s*$", log_text, re.M)
    if not m:
        raise PatchbenchError("the evaluation printed no `Accuracy:` line")
    correct = None
    if dump.is_file():
        blocks = {int(i): text for i, text in _BLOCK.findall(dump.read_text(errors="replace"))}
        if blocks and len(blocks) <= len(truth):
            preds = [answer_value(blocks.get(i, "").rsplit("Answer:", 1)[-1]) for i in range(len(blocks))]
            correct = [int(p is not None and p == t) for p, t in zip(preds, truth)]
    return float(m[-1]), correct


def evaluate(python, environ: dict, module: str, *, questions: int, data: Path, workdir: Path, log: Path,
             host: str, port: int, timeout_s: float) -> tuple[float, list[int] | None]:
    """Run `module` of the env of `python` against the server at host:port, in `workdir` (its dump
    lands there), output appended to `log`, in its own supervised process group. Returns (accuracy,
    per-question correctness or None); raises PatchbenchError when it fails."""
    workdir.mkdir(parents=True, exist_ok=True)
    args = ["--num-questions", str(questions), "--data-path", str(data),
            "--host", host_arg(python, environ, module, host), "--port", str(port)]
    boot = f"import os, runpy, sys; os.chdir({str(workdir)!r}); sys.argv = [{module!r}] + sys.argv[1:]; " \
           f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    proc = supervisor.spawn([str(python), "-c", boot, *args], log=log, environ=environ)
    try:
        code = proc.wait(timeout=timeout_s)
    finally:
        supervisor.stop_group(proc, grace=5.0)
    text = log.read_text(errors="replace")
    if code != 0:
        last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
        raise PatchbenchError(f"{module} exited with code {code}: {last[:200]}")
    return parse(text, workdir / DUMP, labels(data)[:questions])


def run(attempt, host: str, port: int) -> list[Sample]:
    """Run the recipe's evaluation against the live server with its harness; store its outcome in
    extra["quality"]["eval"]."""
    p = attempt.prepared
    spec = p.recipe.quality
    record: dict = {"name": spec.eval, "questions": spec.eval_questions, "harness": spec.eval_harness, "status": "ok"}
    attempt.extra.setdefault("quality", {})["eval"] = record
    environ = {**p.env.run_environ(), **dict(p.recipe.server.env)}
    try:
        data = dataset_path(spec)
        log = attempt.logs["eval"] = attempt.run_dir / "eval.log"
        workdir, timeout_s = attempt.run_dir / "eval", p.recipe.benchmark.timeout_s
        if spec.eval_harness == "sgl-eval":  # its own env (toolkit.run.sgl_eval)
            from toolkit.run import sgl_eval

            module = sgl_eval.HARNESS
            accuracy, correct = sgl_eval.evaluate(sgl_eval.ensure_env(attempt.home), spec.eval,
                                                  rows(data)[:spec.eval_questions], workdir=workdir, log=log,
                                                  host=host, port=port, timeout_s=timeout_s)
        else:
            module = find_module(p.env.python, environ, spec.eval)
            if module is None:
                raise PatchbenchError(f"the env's sglang has none of {', '.join(EVAL_MODULES[spec.eval])}")
            accuracy, correct = evaluate(p.env.python, environ, module, questions=spec.eval_questions, data=data,
                                         workdir=workdir, log=log, host=host, port=port, timeout_s=timeout_s)
    except (PatchbenchError, OSError, subprocess.TimeoutExpired) as exc:
        record.update(status="failed", reason=str(exc))
        attempt.console.print(f"[yellow]{escape(attempt.title)}[/]: evaluation {spec.eval} failed: {escape(str(exc))} (speed numbers kept)")
        return []
    record.update(module=module, accuracy=accuracy, correct=correct, dataset=str(data))
    attempt.console.print(f"[bold]{escape(attempt.title)}[/]: {spec.eval} accuracy {accuracy:.3f} ({module})")
    return [Sample("eval_accuracy", accuracy, "share", 0, "concurrency")]
