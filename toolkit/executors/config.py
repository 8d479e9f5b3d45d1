"""Cluster settings: a `[cluster]` table in the user config, overridden by command-line knobs.

The user config is `$PATCHBENCH_HOME/config.toml` when it exists, else
`~/.config/patchbench/config.toml` (`$XDG_CONFIG_HOME` honoured). Keys of `[cluster]`:

  partition = "gpu"            # sbatch --partition
  account = "perf"             # sbatch --account
  gpus_per_node = 8            # sbatch --gpus-per-node
  time = "02:00:00"            # sbatch --time (minutes or [D-]HH:MM:SS)
  cpus_per_task = 16           # sbatch --cpus-per-task
  node_home = "/local/patchbench"   # PATCHBENCH_HOME on the node (node-local disk: trees, envs, logs)
  poll_s = 5                   # seconds between two looks at the queue
  [cluster.slurm_args]         # anything else sbatch takes, e.g. constraint = "rtx6000", qos = "high"
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from toolkit.errors import BadInput
from toolkit.workspace import user_config_path  # noqa: F401  (its home; named here as before)

EXECUTORS = ("local", "slurm")
DEFAULT_NODE_HOME = "/tmp/patchbench-node"  # node-local: never NFS (SQLite, uv hardlinks, locks)


@dataclass(frozen=True)
class ClusterConfig:
    partition: str | None = None
    account: str | None = None
    gpus_per_node: int | None = None
    time: str | None = None
    cpus_per_task: int | None = None
    node_home: str = DEFAULT_NODE_HOME
    poll_s: float = 5.0
    slurm_args: dict = field(default_factory=dict)
    source: str = "defaults"  # where the settings came from (shown with progress)

    def sbatch_parameters(self) -> dict:
        """submitit SlurmExecutor parameters (its own names; the rest as additional_parameters)."""
        out: dict = {}
        if self.partition:
            out["partition"] = self.partition
        if self.account:
            out["account"] = self.account
        if self.gpus_per_node is not None:
            out["gpus_per_node"] = self.gpus_per_node
        if self.cpus_per_task is not None:
            out["cpus_per_task"] = self.cpus_per_task
        if self.time:
            out["time"] = time_minutes(self.time)
        if self.slurm_args:
            out["additional_parameters"] = {k.replace("-", "_"): v for k, v in self.slurm_args.items()}
        return out


def gpus_needed(recipe) -> int:
    """GPUs a recipe's server uses: `[server] gpus`, else its tensor-parallel size (sglang's
    `--tp-size`, default 1), 0 for a recipe that runs on CPU."""
    if recipe.server.gpus is not None:
        return int(recipe.server.gpus)
    tp = dict(recipe.server.args).get("tp-size", dict(recipe.server.args).get("tp", 1))
    try:
        return int(tp)
    except (TypeError, ValueError):
        return 1


def for_recipes(cfg: ClusterConfig, recipes) -> ClusterConfig:
    """Ask for as many GPUs per node as the most demanding recipe uses, unless --gpus-per-node (or
    the config) says otherwise."""
    need = max((gpus_needed(r) for r in recipes), default=0)
    return replace(cfg, gpus_per_node=need) if cfg.gpus_per_node is None and need > 0 else cfg


def time_minutes(text: str | int) -> int:
    """Slurm's time formats (MM, HH:MM:SS, D-HH[:MM[:SS]]) -> whole minutes (at least 1)."""
    s = str(text).strip()
    try:
        days = 0
        if "-" in s:
            d, s = s.split("-", 1)
            days = int(d)
        parts = [int(p) for p in s.split(":")]
    except ValueError:
        raise BadInput(f"--time {text!r}: use minutes, HH:MM:SS or D-HH:MM:SS") from None
    if "-" in str(text):
        parts = (parts + [0, 0])[:3]
        h, m, sec = parts
    elif len(parts) == 1:
        h, m, sec = 0, parts[0], 0
    elif len(parts) == 2:
        h, m, sec = 0, parts[0], parts[1]
    else:
        h, m, sec = parts[-3:]
    return max(1, days * 1440 + h * 60 + m + (1 if sec else 0))


_KEYS = {"partition", "account", "gpus_per_node", "time", "cpus_per_task", "node_home", "poll_s", "slurm_args"}


def load_cluster_config(home: Path) -> ClusterConfig:
    path = user_config_path(home)
    if not path.is_file():
        return ClusterConfig()
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"{path}: {exc}") from None
    table = doc.get("cluster", {})
    unknown = set(table) - _KEYS
    if unknown:
        raise BadInput(f"{path}: unknown [cluster] key(s) {', '.join(sorted(unknown))} "
                       f"(known: {', '.join(sorted(_KEYS))})")
    return ClusterConfig(**{k: v for k, v in table.items()}, source=str(path))


def parse_slurm_args(items: list[str] | None) -> dict:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"--slurm-arg {item!r}: expected KEY=VALUE (e.g. constraint=h100)")
        out[key.strip().lstrip("-")] = value
    return out


def add_executor_arguments(parser) -> None:
    g = parser.add_argument_group("executor (where sweeps run)")
    g.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="local (this machine) or slurm (one job per sweep, through submitit)")
    g.add_argument("--partition", default=None, help="Slurm partition (default: [cluster] partition)")
    g.add_argument("--account", default=None, help="Slurm account")
    g.add_argument("--gpus-per-node", type=int, default=None, help="GPUs to ask for per job")
    g.add_argument("--time", default=None, help="job time limit (minutes or HH:MM:SS)")
    g.add_argument("--slurm-arg", action="append", default=None, metavar="KEY=VALUE",
                   help="any other sbatch option (repeatable), e.g. constraint=h100")
    g.add_argument("--node-home", default=None, help="PATCHBENCH_HOME on the node (node-local disk)")


def cluster_config(args, home: Path) -> ClusterConfig:
    """The user config's `[cluster]` table with the command line's knobs on top."""
    cfg = load_cluster_config(home)
    over = {k: getattr(args, k, None) for k in ("partition", "account", "gpus_per_node", "time", "node_home")}
    over = {k: v for k, v in over.items() if v is not None}
    extra = parse_slurm_args(getattr(args, "slurm_arg", None))
    if extra:
        over["slurm_args"] = {**cfg.slurm_args, **extra}
    return replace(cfg, **over)


def fixed_design_only(command: str, asked: list[str], *, plain: bool) -> str | None:
    """A Slurm job measures the fixed design (each recipe's `[benchmark] repeats`, interleaved in one job):
    the sequential design's options (`asked`: those given) are refused (BadInput) rather than silently
    unused; `plain` (the call would be sequential locally): the note saying so, else None."""
    if asked:
        raise BadInput(f"{command} --executor slurm measures the fixed design (each recipe's [benchmark] repeats); "
                       f"{', '.join(asked)} {'is' if len(asked) == 1 else 'are'} the sequential design's, which runs "
                       "locally only", hint="drop them (or --repeats N), or run without --executor slurm")
    if plain:
        return (f"{command} --executor slurm measures the fixed design (each recipe's [benchmark] repeats, or "
                "--repeats N); launching until each verdict is settled (the local default) runs locally only")
    return None
