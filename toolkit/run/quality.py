"""The output check: the recipe's `[quality]` prompts through the live server, after the benchmark,
in the same launch (effects: HTTP requests, `quality.json` in the run's directory, the run's
`extra["quality"]`).

Every prompt goes to sglang's native `POST /generate` (the API the serving benchmark drives; it is
the one that returns the generated token ids), greedy (`temperature` 0; the server runs with its
recipe's `--random-seed`), `max_new_tokens = max_tokens`, with `return_logprob` when asked, at each
quality point (at most `c` requests in flight). Stored per run:

- `quality.json` beside the run's logs: per point, each prompt's output token ids, text and
  whether its logprobs were finite (the artifact the verdict and the report read);
- samples at each point (toolkit.results.metrics): `output_sanity` (share of non-degenerate answers,
  toolkit.run.answers), and against the reference (the newest run of the recipe's `compare_to`
  holding answers to the same prompts; for a baseline, its own previous launch) `answer_agreement`
  and `first_divergence`;
- `extra["quality"]`: status `ok`, `broken` (some answers degenerate: the run is stored `invalid`,
  whatever its speed), `failed` (a request failed or the server died: the reason is kept, the
  speed numbers stay) or `skipped` (see below), the artifact's path, and whether the outputs can
  tell anything at all (`informative`; the miniature without its torch step makes text from a hash
  of the prompt).

Answers belong to a configuration, not to a launch: once `[quality] launches` earlier launches of
the same configuration (recipe, run identity, prompts, tokens and points) answered with sane output,
a launch skips the check (`skipped`, naming those runs; `answers_from` lists them with their artifacts,
[run id, artifact, started_at]: a selection of only this launch still carries its configuration's
answers). What was asked (prompts, tokens, points, logprobs, the gate's settings) is `extra.quality.key`;
a launch whose gate did not run ok does not answer for another. The default is 2 for a reference (a recipe
that is its own `compare_to`, one another recipe compares against, or a sweep's default configuration:
its run-to-run variation is the floor) and 1 for a candidate. A broken
or failed check is asked again in the next launch. Speed repeats therefore cost no answers, and
re-running a recipe costs none at all; `launches = 0` turns an inherited check off; a quality metric measured by attribute/bisect asks in every
launch (`Attempt.answer_launches`, EVERY_LAUNCH), and the base of a stack in two. With sequential
launches a candidate's launch answers only while its sequential answers verdict is unsettled
(`Attempt.answer_rule`, an AnswerRule made by toolkit.analysis.answers_rule: this stage only asks it,
and stores its `record` as `extra.quality.rule`, which the verdict reads to judge by the same rule).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Protocol

from rich.markup import escape

from toolkit.recipe.spec import BenchSpec, QualitySpec
from toolkit.results import metrics
from toolkit.run import answers
from toolkit.run.bench import Sample
from toolkit.run.prompts import Prompt, digest, load_prompts, take

ARTIFACT = "quality.json"
ANSWER_METRICS = frozenset({"answer_agreement", "first_divergence", "output_sanity", "eval_accuracy"})
EVERY_LAUNCH = 1 << 30  # `answer_launches` that asks in every launch
NOT_INFORMATIVE = ("the miniature without its torch step makes its text from a hash of the prompt, not from any "
                   "computation: no patch can change it (the torch step, --mini-torch-step, makes it real)")


class AnswerRule(Protocol):
    """Whether a launch asks its answers, decided by the stage that plans the launches."""

    record: dict  # stored as extra.quality.rule (the parameters the verdict must judge with)

    def __call__(self, attempt, key: list) -> tuple[str, list] | None:
        """(why this launch asks nothing, the launches that answered for it), or None when it asks."""


class QualityFailed(Exception):
    """A request of the check failed (the reason is stored; the speed numbers stay)."""


def points(spec: QualitySpec, bench: BenchSpec, n_prompts: int) -> tuple[int, ...]:
    """The recipe's quality points, else the lowest and highest benchmark point the prompts can fill."""
    if spec.concurrency:
        return tuple(spec.concurrency)
    pts = bench.concurrency if bench.driver == "serving" else bench.batch_sizes
    fill = sorted(c for c in pts if c <= n_prompts) or [1]
    return tuple(sorted({fill[0], fill[-1]}))


def informative(info: dict) -> tuple[bool, str | None]:
    """Whether answers depend on what the server computes ((False, why) for the hash-text miniature)."""
    if info.get("mini_outputs") == "prompt-hash" or ("mini_tokenizer" in info and "mini_outputs" not in info):
        return False, NOT_INFORMATIVE
    return True, None


async def _one(session, url: str, prompt: Prompt, spec: QualitySpec) -> dict:
    import aiohttp

    body = {"text": prompt.prompt, "stream": False,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": spec.max_tokens}}
    if spec.logprobs:
        body["return_logprob"] = True
    try:
        async with session.post(url + "/generate", json=body) as resp:
            text = await resp.text()
            if resp.status != 200:
                raise QualityFailed(f"prompt {prompt.id}: HTTP {resp.status}: {' '.join(text.split())[:200]}")
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise QualityFailed(f"prompt {prompt.id}: {type(exc).__name__}: {exc}") from None
    data = json.loads(text)
    meta = data.get("meta_info") or {}
    ids = data.get("output_ids")
    lps = meta.get("output_token_logprobs")
    if ids is None and lps:  # older servers: the ids only inside the logprobs
        ids = [row[1] for row in lps]
    if ids is None:
        raise QualityFailed(f"prompt {prompt.id}: the server returned no output token ids")
    out = {"id": prompt.id, "ids": [int(i) for i in ids], "text": data.get("text", "")}
    if spec.logprobs:
        out["logprobs"] = [None if row[0] is None else float(row[0]) for row in (lps or [])]
    return out


async def _point(url: str, prompts: list[Prompt], spec: QualitySpec, c: int, timeout_s: float) -> list[dict]:
    import aiohttp

    sem = asyncio.Semaphore(c)

    async def bounded(session, p):
        async with sem:
            return await _one(session, url, p, spec)

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        return list(await asyncio.gather(*(bounded(session, p) for p in prompts)))


def ask(url: str, spec: QualitySpec, pts: tuple[int, ...], prompts: list[Prompt], timeout_s: float) -> dict:
    """Answers per point: {point: [answer per prompt]}. Raises QualityFailed."""
    return {c: asyncio.run(_point(url, prompts, spec, c, timeout_s)) for c in pts}


def _logprobs(rows: list[dict]):
    return [r.get("logprobs") for r in rows] if rows and "logprobs" in rows[0] else None


def reference_answers(store, recipe: str, prompts_digest: str, max_tokens: int, exclude: str) -> tuple[str, dict] | None:
    """(run id, artifact) of the newest ok run of `recipe` with answers to the same prompts."""
    for run in store.runs(recipe=recipe, status="ok", newest_first=True):
        q = (run.extra or {}).get("quality") or {}
        if run.run_id == exclude or q.get("status") != "ok" or (q.get("key") or [prompts_digest, max_tokens])[:2] != [
                prompts_digest, max_tokens]:
            continue
        art = read_artifact(q.get("artifact"))
        if art and art.get("prompts_digest") == prompts_digest and art.get("max_tokens") == max_tokens:
            return run.run_id, art
    return None


def read_artifact(path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError, TypeError):
        return None


def launches_needed(recipe) -> int:
    """Launches of one configuration that answer: `[quality] launches`, else 2 for a reference (a
    recipe that is its own compare_to, that another recipe of the project compares against, or that
    has a `[matrix]`: a sweep judges every variant against it, whatever compare_to it inherited; its
    own variation is the floor), 1 for a candidate."""
    from toolkit.recipe.load import compared_against
    from toolkit.recipe.matrix import variants_of

    if recipe.quality.launches is not None:
        return recipe.quality.launches
    reference = (recipe.compare_to in (None, recipe.name) or recipe.name in compared_against(recipe)
                 or bool(variants_of(recipe)))
    return 2 if reference else 1


def asked_key(spec: QualitySpec, prompts: list[Prompt], pts: tuple[int, ...]) -> list:
    """What a launch's check asks (stored as `extra.quality.key`): the prompt set, tokens, points,
    logprobs and the gate's settings. Only a launch asked the same answers for another."""
    return [digest(prompts), spec.max_tokens, sorted(pts), spec.logprobs, spec.eval, spec.eval_harness,
            spec.eval_questions, str(spec.dataset) if spec.dataset else None]


def answered_before(store, name: str, identity: str, key: list, exclude: str, need: int) -> list[list]:
    """Up to `need` earlier launches of one configuration (recipe `name`, run `identity`) whose
    check was asked the same (`key`) with sane output and, with a gate, an evaluation that ran,
    oldest first: [run id, artifact, started_at] each. Reads the store only, no artifact."""
    out = []
    for run in store.runs(recipe=name, identity=identity):
        q = (run.extra or {}).get("quality") or {}
        if run.run_id == exclude or q.get("status") != "ok" or q.get("key") != key:
            continue
        if key[4] and (q.get("eval") or {}).get("status") != "ok":
            continue
        out.append([run.run_id, q.get("artifact"), run.started_at])
        if len(out) == need:
            break
    return out


def _skip(attempt, key: list) -> tuple[str, list] | None:
    """(why this launch asks nothing, the launches that answered for it: `answered_before`), or
    None when it asks."""
    from toolkit.run.identity import expected_identity
    from toolkit.run.machine import this_gpu_key

    if attempt.answer_rule is not None:
        return attempt.answer_rule(attempt, key)
    p = attempt.prepared
    need = launches_needed(p.recipe) if attempt.answer_launches is None else attempt.answer_launches
    if need == 0:
        return "[quality] launches = 0: the check is off for this recipe", []
    if need >= EVERY_LAUNCH:
        return None
    identity = expected_identity(p.recipe, p.env.key, this_gpu_key())
    before = answered_before(attempt.store, p.name, identity, key, attempt.run_id, need)
    if len(before) < need:
        return None
    return (f"{need} earlier launch(es) of this configuration were asked the same "
            f"({', '.join(r[0][:8] for r in before)}); [quality] launches = {need}"), before


def check(attempt, url: str) -> tuple[list[Sample], list[str]]:
    """Run the check for `attempt` (an toolkit.run.attempt.Attempt) against `url`: write the
    artifact, set `attempt.extra["quality"]`, return the samples and the problems that make the run
    invalid (degenerate output). Skipped (status `skipped`) when enough launches answered."""
    recipe = attempt.prepared.recipe
    spec = recipe.quality
    prompts = take(load_prompts(spec.prompts), spec.count)
    pts = points(spec, recipe.benchmark, len(prompts))
    ok, why = informative(attempt.info)
    key = asked_key(spec, prompts, pts)
    summary: dict = {"status": "ok", "points": list(pts), "prompts": str(spec.prompts), "informative": ok,
                     "why": why, "key": key}
    if attempt.answer_rule is not None:
        summary["rule"] = attempt.answer_rule.record
    attempt.extra["quality"] = summary
    skip = _skip(attempt, key)
    if skip:
        summary.update(status="skipped", reason=skip[0], answers_from=skip[1])
        attempt.console.print(f"[dim]{escape(attempt.title)}: output check skipped: {escape(skip[0])}[/]")
        return [], []
    t0 = time.monotonic()
    try:
        got = ask(url, spec, pts, prompts, recipe.benchmark.timeout_s)
    except QualityFailed as exc:
        summary.update(status="failed", reason=str(exc))
        attempt.console.print(f"[yellow]{escape(attempt.title)}[/]: output check failed: {escape(str(exc))} (speed numbers kept)")
        return [], []
    path = attempt.run_dir / ARTIFACT
    art = {"prompts": str(spec.prompts), "prompts_digest": digest(prompts), "max_tokens": spec.max_tokens,
           "informative": ok, "why": why, "prompt_text": {p.id: p.prompt for p in prompts},
           "points": {str(c): rows for c, rows in got.items()}}
    ref = reference_answers(attempt.store, recipe.compare_to or recipe.name, art["prompts_digest"],
                            spec.max_tokens, attempt.run_id)
    samples: list[Sample] = []
    problems: list[str] = []
    share = metrics.unit_of
    for c, rows in got.items():
        ids = [r["ids"] for r in rows]
        flags = answers.degenerate(ids, _logprobs(rows))
        for r, f in zip(rows, flags):
            r["degenerate"] = f
        sane = sum(f is None for f in flags) / len(flags)
        samples.append(Sample("output_sanity", sane, share("output_sanity"), c, "concurrency"))
        if sane < 1.0:
            bad = [f for f in flags if f]
            problems.append(f"broken output at concurrency {c}: {len(bad)} of {len(flags)} answers degenerate "
                            f"({', '.join(sorted(set(bad)))})")
        ref_rows = ((ref[1].get("points") or {}).get(str(c)) if ref else None)
        if ref_rows and len(ref_rows) == len(rows):
            ref_ids = [r["ids"] for r in ref_rows]
            samples.append(Sample("answer_agreement", answers.agreement(ids, ref_ids),
                                  share("answer_agreement"), c, "concurrency"))
            samples.append(Sample("first_divergence", answers.median_first_divergence(ids, ref_ids),
                                  share("first_divergence"), c, "concurrency"))
    path.write_text(json.dumps(art))
    attempt.logs["quality"] = path
    summary.update(artifact=str(path), reference_run=ref[0] if ref else None,
                   seconds=round(time.monotonic() - t0, 3))
    if problems:
        summary.update(status="broken", reason="; ".join(problems))
    attempt.console.print(f"[bold]{escape(attempt.title)}[/]: output check of {len(prompts)} prompts at "
                          f"c={','.join(map(str, pts))}: {summary['status']}"
                          + ("" if ok else " (not informative: text from a hash of the prompt)"))
    return samples, problems
