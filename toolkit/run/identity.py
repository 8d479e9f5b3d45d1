"""A recipe's run identity as the recipe file defines it now (toolkit/results/identity.py has the
components and the key): the effective server argv, [server.env], the model and its config hash,
the [target] and the benchmark key. Reads the model's config.json when it is a local directory."""

from __future__ import annotations

from pathlib import Path

from toolkit.digest import sha256_file
from toolkit.recipe.load import Recipe
from toolkit.results.identity import normal_argv
from toolkit.results.records import bench_key
from toolkit.run.sglang_args import launch_argv


def model_config_sha256(model: str | None) -> str | None:
    """sha256 of `<model>/config.json` when the model is a readable local directory, else None
    (a hub id or a path on another machine: the path alone identifies it)."""
    if not model:
        return None
    config = Path(model).expanduser() / "config.json"
    try:
        return sha256_file(config) if config.is_file() else None
    except OSError:
        return None


def recipe_definition(recipe: Recipe) -> dict:
    """The definition components of `recipe` as its file says now (results.identity.DEFINITION_FIELDS)."""
    server = recipe.server
    resolved = recipe.to_dict()
    return {
        "server_argv": normal_argv(launch_argv(server, host="-", port=0)),
        "server_env": dict(sorted(dict(server.env).items())),
        "model": (resolved.get("server") or {}).get("model"),
        "target": resolved.get("target") or None,
        "bench_key": bench_key(recipe.benchmark.driver, recipe.benchmark.params()),
        "bench_params": recipe.benchmark.params(),  # not compared: describes a benchmark change
    }


def expected_identity(recipe: Recipe, env_key: str, gpu_key: str) -> str:
    """The identity a run of `recipe` in env `env_key` on GPUs `gpu_key` gets when stored: the
    variant cache looks runs up by it before measuring."""
    from toolkit.results.identity import identity_key

    parts = {k: v for k, v in recipe_definition(recipe).items() if k != "bench_params"}
    return identity_key({**parts, "env_key": env_key, "gpu_key": gpu_key,
                         "model_config": model_config_sha256(recipe.server.model)})


def current_definitions(names, load) -> dict[str, dict]:
    """name -> `recipe_definition` for every name `load` can read as a recipe now (a variant label
    such as `full-stack@prefix2` or a deleted recipe has none: its runs are judged by identity alone)."""
    from toolkit.errors import BadInput

    out = {}
    for name in dict.fromkeys(names):
        try:
            out[name] = recipe_definition(load(name))
        except BadInput:
            continue
    return out
