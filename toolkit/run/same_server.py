"""Which configurations of a sweep are one server: sglang's own resolved configuration decides.

Two [matrix] variants can differ in their launch argv and still be one server: sglang resolves
`--moe-runner-backend auto` to flashinfer_cutlass for modelopt_fp4 on SM120, and a flag given with
its default value resolves to what its absence does. A sweep measured each as a configuration of its
own: launches spent twice, and two rows that are one server, the second "faster" than itself.

`resolved(info)` is what a launched server reports at /server_info (sglang 0.5.23: every ServerArgs
field at the top level, the scheduler's own copy per DP rank in `internal_states`, which holds what
the scheduler resolved after loading) less what differs launch to launch of one configuration, read
off two launches of one recipe on real sglang 0.5.23: the port and host, `launch_command` (the argv,
which is what differs between such variants), `startup_time`, the memory the launch measured
(`memory_usage`, `max_total_num_tokens`, `effective_max_running_requests_per_dp`,
`decode_cuda_graph_memory_gb`: free memory differs launch to launch on a GPU), live counters
(`last_gen_throughput`, `status`), ports sglang picks itself (`nccl_port`, `dist_init_addr`),
process ids, the parser's bookkeeping of which flags were typed (`_*_explicitly_set`: the values
they led to are compared), and `random_seed` unless the recipe sets it (sglang picks one per launch).

`server_key` adds what /server_info does not show: the env (build and patches), `[server.env]`, the
model and its config, the target and the benchmark. `Guard` is handed to each launch's verify step
(toolkit.run.pipeline.verify): a launch whose key an earlier configuration of the sweep launched
with raises `SameServer`, and `toolkit.run.attempt.recorded` stores it as a verify run
(`extra.same_server_as`), benchmarked no further. Effects: `seed` reads the store.
"""

from __future__ import annotations

import hashlib
import json
from toolkit.errors import PatchbenchError

# what differs between two launches of one configuration (see the module docstring)
PER_LAUNCH = frozenset({
    "host", "port", "launch_command", "startup_time", "nccl_port", "dist_init_addr", "memory_usage",
    "max_total_num_tokens", "effective_max_running_requests_per_dp", "decode_cuda_graph_memory_gb",
    "last_gen_throughput", "status", "mini_child_pids", "mini_ready",
})


class SameServer(PatchbenchError):
    """This launch is the server another configuration of the sweep launched: not benchmarked again."""

    def __init__(self, name: str, other: str):
        super().__init__(f"same server as {other}: sglang resolved {name} to {other}'s configuration "
                         f"(/server_info, less per-launch fields; same env and benchmark): not benchmarked again, "
                         f"{other}'s numbers stand for it")
        self.other = other


def resolved(info: dict, *, seed_given: bool) -> dict:
    """/server_info less what differs launch to launch (PER_LAUNCH, pid fields, `_` bookkeeping, an
    auto-picked random_seed), the top level and each `internal_states` entry alike."""
    def strip(d: dict) -> dict:
        return {k: v for k, v in d.items()
                if k not in PER_LAUNCH and not k.startswith("_") and not k.endswith(("_pid", "_pids"))
                and (seed_given or k != "random_seed")}

    out = strip({k: v for k, v in info.items() if k != "internal_states"})
    out["internal_states"] = [strip(s) for s in info.get("internal_states") or [] if isinstance(s, dict)]
    return out


def server_key(recipe, env_key: str | None, info: dict) -> str:
    """What makes a launch this server: its resolved configuration, env, [server.env], model, target and
    benchmark (toolkit.run.identity.recipe_definition without the argv)."""
    from toolkit.run.identity import model_config_sha256, recipe_definition

    parts = {k: v for k, v in recipe_definition(recipe).items() if k not in ("server_argv", "bench_params")}
    seed = any(flag == "random-seed" for flag, _ in recipe.server.args)
    parts.update(env_key=env_key, model_config=model_config_sha256(recipe.server.model),
                 resolved=resolved(info, seed_given=seed))
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class Guard:
    """The server keys a sweep's configurations launched with: `same` holds each configuration found to
    be another's server (name -> that one). Of configurations found to be one server, the first in
    `order` (the sweep's: the default first) is the one measured, whichever launched first (a variant's
    stored launches do not make the default its copy). One guard serves a whole sweep (every runner
    call, every SLA round)."""

    def __init__(self, order: list[str] | None = None) -> None:
        self.order = {name: i for i, name in enumerate(order or [])}
        self.first: dict[str, str] = {}
        self.same: dict[str, str] = {}

    def known(self, name: str, recipe, env_key: str | None, info: dict) -> str | None:
        """The configuration measured for this server when it is not `name`, else None (and `name` holds
        the key from now, the one it held before becoming a copy of `name`)."""
        key = server_key(recipe, env_key, info)
        first = self.first.setdefault(key, name)
        if first == name:
            return None
        rank = lambda n: self.order.get(n, len(self.order))  # noqa: E731
        if rank(name) < rank(first):  # `name` comes first in the sweep: the other is its copy from now
            self.first[key] = name
            self.same[first] = name
            self.same.update({n: name for n, o in self.same.items() if o == first})
            return None
        self.same[name] = first
        return first

    def __call__(self, p, info: dict) -> None:
        """The verify step's check (`p`: toolkit.run.attempt.Prepared): raise SameServer when an earlier
        configuration launched this server."""
        other = self.known(p.name, p.recipe, p.env.key if p.env else None, info)
        if other is not None:
            raise SameServer(p.name, other)

    def seed(self, store, configs: list[tuple]) -> None:
        """Learn the servers that configurations' stored launches reported ((name, recipe, env key) in sweep
        order; the newest verified launch of each one's run identity): those found to be an earlier one's
        server (`same`) a resumed sweep launches not even once."""
        from toolkit.run.identity import expected_identity
        from toolkit.run.machine import this_gpu_key

        gpu = this_gpu_key()
        for name, recipe, env_key in configs:
            if env_key is None:
                continue
            rows = store.runs(identity=expected_identity(recipe, env_key, gpu), status="ok",
                              config_verified=True, newest_first=True)
            info = next((r.server_info for r in rows if r.server_info), None)
            if info:
                self.known(name, recipe, env_key, info)
