"""The benchmark step's one-batch driver (toolkit.run.pipeline.benchmark): sglang's one-batch benchmark
in its own supervised process group, with the launch's environment, no server; its JSONL read as samples."""

from __future__ import annotations

from toolkit.run.attempt import Attempt, supervise
from toolkit.run.bench import Sample
from toolkit.run.bench.one_batch import find_one_batch_module, one_batch_argv, parse_one_batch_jsonl, run_one_batch
from toolkit.run.launch_env import launch_environ, record as launch_env_record, scratch_dir
from toolkit.run.sglang_args import recipe_args


def measure(a: Attempt) -> list[Sample]:
    """Run the recipe's batch sizes (writes one_batch.jsonl and one_batch.log in the run's folder)."""
    p, bench = a.prepared, a.prepared.recipe.benchmark
    environ = launch_environ(p.env.run_environ(), p.recipe.server.env, a.run_dir)
    a.extra["launch_env"] = launch_env_record(environ, p.recipe.server.env)
    out = a.run_dir / "one_batch.jsonl"
    log = a.logs["one-batch"] = a.run_dir / "one_batch.log"
    argv = one_batch_argv(python=str(p.env.python), module=find_one_batch_module(p.env.python, environ),
                          model_path=p.recipe.server.model, batch_sizes=bench.batch_sizes,
                          input_len=bench.input_len, output_len=bench.output_len, result_filename=str(out),
                          server_argv=recipe_args(p.recipe.server))
    a.logs["result"] = out
    run_one_batch(argv, log=log, environ=environ, timeout_s=bench.timeout_s,
                  started=lambda proc: supervise(a, proc, "one-batch", stop=lambda: None),
                  scratch=scratch_dir(a.run_dir))
    return parse_one_batch_jsonl(out, input_len=bench.input_len, output_len=bench.output_len)
