"""The benchmark step's serving driver (toolkit.run.pipeline.benchmark): the recipe's [benchmark] as the
client's configuration, run against the launched server, its points gathered into samples and said."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape

from toolkit.run.bench import Sample, point_record


def measure(url: str, bench, console: Console, name: str, *,
             model: str | None = None, env_dir: Path | None = None) -> tuple[list[Sample], list[str], dict, list]:
    """(samples, errors, the server's own account of each point's window: {concurrency: account},
    empty without /metrics; its notes printed, the points)."""
    from toolkit.envs.manifest import jit_file_count
    from toolkit.run.bench.serving import ServingConfig, run_serving
    from toolkit.run.bench.workload import model_vocab

    cfg = ServingConfig(input_len=bench.input_len, output_len=bench.output_len,
                        concurrency=tuple(bench.concurrency), num_prompts=bench.num_prompts, warmup=bench.warmup,
                        seed=bench.seed, endpoint=bench.endpoint, timeout_s=bench.timeout_s,
                        vocab_size=model_vocab(model), flush_cache=bench.flush_cache, warmup_fill=bench.warmup_fill)
    points = run_serving(url, cfg, compiled=(lambda: jit_file_count(env_dir)) if env_dir else None)
    samples, errors, accounts, notes = point_record.gather(points)
    for concurrency, note in notes:
        console.print(f"[yellow]{escape(name)}[/]: concurrency {concurrency}: {escape(note)}")
    best = max((s.value for s in samples if s.metric == "output_tok_s"), default=0.0)
    counted = any(pt.server is not None for pt in points)
    said = "" if counted else " (no server account: the server has no /metrics; pass enable-metrics)"
    console.print(f"[bold]{escape(name)}[/]: {len(points)} points, best output {best:.1f} tok/s{escape(said)}")
    return samples, errors, accounts, points
