"""Server argv from a recipe, and the static config check with the env's own sglang parser.

The check runs before any GPU time is spent: unknown or removed flags for that sglang version are
named, the parsed `ServerArgs` fields are compared with the recipe's `[expect]` and with what the
arguments imply (`ep-size = 8` must yield `ep_size == 8`). With a `[target]`, the probe presents
that machine to the env's sglang and runs its real validation and default resolution
(toolkit/probes/server_args.py): a refusal is a BadInput quoting sglang; the resolved effective
config (KEY_FIELDS) is stored, printed and checked against /server_info after launch.
"""

from __future__ import annotations

import difflib
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import BadInput, PatchbenchError
from toolkit.resources import PROBES_DIR
from toolkit.run.parallel_layout import per_rank_chunk

PROBE = PROBES_DIR / "server_args.py"


def recipe_args(server) -> list[str]:
    """The recipe's `[server.args]` as argv: true -> bare flag, false -> omitted, list -> repeated values."""
    argv: list[str] = []
    for flag, value in server.args:
        if value is False or value is None:
            continue
        argv.append(f"--{flag}")
        if value is True:
            continue
        if isinstance(value, (list, tuple)):
            argv.extend(str(v) for v in value)
        else:
            argv.append(str(value))
    return argv


def launch_argv(server, *, host: str, port: int, model: str | None = None) -> list[str]:
    """Arguments after `python -m sglang.launch_server`."""
    argv = []
    model = model or server.model
    if model:
        argv += ["--model-path", model]
    return [*argv, "--host", host, "--port", str(port), *recipe_args(server)]


def _same(expected, actual) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return str(expected).lower() == str(actual).lower()
    if isinstance(expected, (int, float)) or isinstance(actual, (int, float)):
        try:
            return float(expected) == float(actual)
        except (TypeError, ValueError):
            return False
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        return len(expected) == len(actual) and all(_same(e, a) for e, a in zip(expected, actual))
    return str(expected) == str(actual)


def implied_expectations(server, dests: dict[str, str], fields: dict | None = None) -> dict[str, object]:
    """What the arguments imply about the parsed fields: `--ep-size 8` -> ep_size == 8. `auto` implies
    nothing: it asks sglang to choose (0.5.23 rewrites `--moe-runner-backend auto` to flashinfer_cutlass
    for modelopt_fp4 on SM110/SM120, srt/arg_groups/overrides.py); the choice is the resolved value,
    recorded and checked against /server_info. `false` omits the flag: it implies False of a boolean
    field (`fields`: the parsed ones), and of a valued one (`random-seed = false` unsetting an inherited
    seed) sglang's default, nothing to expect. The negative spelling of an argparse
    BooleanOptionalAction (`--no-X`, whose field is X's: sglang 0.5.23 has 13, e.g.
    `--no-enable-tf32-matmul`, `--no-dllm-fdfo`) implies the field False."""
    implied = {}
    for flag, value in server.args:
        dest = dests.get(f"--{flag}")
        if dest is None or value is None or (isinstance(value, str) and value.lower() == "auto"):
            continue
        if value is False and fields is not None and not isinstance(fields.get(dest), bool):
            continue
        if negated(flag, dests):
            if value is False:  # the flag omitted: nothing said about the field
                continue
            value = not value if isinstance(value, bool) else value
        implied[dest] = list(value) if isinstance(value, (list, tuple)) else value
    return implied


def negated(flag: str, dests: dict[str, str]) -> bool:
    """`no-X` is the negative half of a boolean pair: `--X` exists and writes the same field."""
    return flag.startswith("no-") and dests.get(f"--{flag[3:]}") is not None \
        and dests.get(f"--{flag[3:]}") == dests.get(f"--{flag}")


# sglang's own renames of a deprecated spelling (a flag's value moved to another field, not dropped):
# (the flag's field, where its value moves, what the flag's field keeps). sglang 0.5.23
# (srt/arg_groups/parallel_hook.py, handle_deprecated_dp_attention): `--dp-size N --enable-dp-attention`
# becomes attn_dp_size = N, dp_size = 1 (dp_size counts replicas again).
MOVED = (("dp_size", "attn_dp_size", 1),)
# sglang's own division of a flag's value among ranks: (the field, the field it is divided by). sglang
# 0.5.23 (parallel_hook.py, _handle_data_parallelism): with attention DP each attention-DP rank
# prefills chunked_prefill_size // attn_dp_size (toolkit.run.parallel_layout.per_rank_chunk).
DIVIDED = (("chunked_prefill_size", "attn_dp_size"),)


def follow_moves(implied: dict, fields: dict, version: str | None) -> tuple[dict, list[str]]:
    """`implied` with each flag sglang moved to another field (MOVED) expected there instead, and each
    value sglang divides among ranks (DIVIDED) expected as the share, with a line saying so; a value
    that moved nowhere, or was changed otherwise, stays expected as the flag gave it (a mismatch)."""
    out, notes = dict(implied), []
    for src, dst, kept in MOVED:
        if (src in out and dst in fields and dst not in out and not _same(out[src], kept)
                and _same(fields[dst], out[src]) and _same(fields.get(src), kept)):
            flag = "--" + src.replace("_", "-")
            notes.append(f"sglang {version} reads {flag} {out[src]} as {dst} = {out[src]} ({src} = {kept}): "
                         f"the launched server is checked for that")
            out[dst], out[src] = out[src], kept
    for src, by in DIVIDED:
        try:
            given, ranks = int(out[src]), int(out.get(by, fields.get(by)))
        except (KeyError, TypeError, ValueError):
            continue
        share = per_rank_chunk(given, ranks)
        if share != given and _same(fields.get(src), share):
            notes.append(f"sglang {version} gives each of the {ranks} attention-DP ranks --{src.replace('_', '-')} "
                         f"{given} // {ranks} = {share}: the launched server is checked for that")
            out[src] = share
    return out, notes


def compare_fields(expect: dict, fields: dict, *, source: str) -> list[str]:
    """Mismatches between expectations and observed fields, one message per field."""
    problems = []
    for key, want in expect.items():
        if key not in fields:
            problems.append(f"{source} has no field `{key}` (expected {want!r})")
        elif not _same(want, fields[key]):
            problems.append(f"{key}: expected {want!r}, {source} says {fields[key]!r}")
    return problems


@dataclass
class StaticCheck:
    ok: bool
    version: str | None
    fields: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    resolved: bool = False
    note: str | None = None
    implied: dict = field(default_factory=dict)  # field -> value the recipe's flags imply
    resolved_config: dict = field(default_factory=dict)  # sglang's resolved_dict() for the target
    target: dict | None = None  # the facts presented (toolkit.recipe.target.target_facts)
    shape: dict = field(default_factory=dict)  # model-shape check: weights per GPU, budget, notes
    outcome: str = "ok"  # "ok", or "unresolved: <exception line>" (the check could not check)
    presented: dict | None = None  # what the probe presented to sglang (target, platform facts)
    warnings: list[str] = field(default_factory=list)  # what the check did not check, printed

    @property
    def unresolved(self) -> bool:
        return self.outcome.startswith("unresolved")


def static_check(python: Path, server, expect: dict, *, environ: dict | None = None,
                 model: str | None = None, device: str | None = None, target: dict | None = None,
                 timeout: float = 900) -> StaticCheck:
    """Parse (and for `target`, resolve) the recipe's server args with the env's sglang; raise
    BadInput on unknown flags or when sglang refuses the configuration."""
    argv = launch_argv(server, host="127.0.0.1", port=30000, model=model)
    request = {"argv": argv, "device": device or "", "target": target}
    try:
        proc = subprocess.run([str(python), str(PROBE), json.dumps(request)], capture_output=True, text=True,
                              env=environ, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PatchbenchError(f"the sglang argument parser did not answer within {timeout:.0f} s") from None
    try:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise PatchbenchError(f"the sglang argument probe failed: {' | '.join(tail)}") from None
    version = report.get("version")
    err = report.get("error")
    if err and not report["fields"]:
        if "unrecognized arguments" in err or "ambiguous option" in err or "invalid choice" in err or "expected" in err:
            bad = [a for a in argv if a.startswith("--") and a.split("=")[0] not in report["options"]]
            hint = None
            if bad:
                close = difflib.get_close_matches(bad[0], report["options"], n=1)
                hint = f"did you mean `{close[0]}`?" if close else "removed in this version?"
            raise BadInput(f"sglang {version} does not accept the server arguments: {err}", hint=hint)
        if err.startswith("cannot import"):
            raise PatchbenchError(err)
        raise BadInput(f"sglang {version}: {err}")
    if report.get("refused"):
        raise BadInput(f"sglang {version} refuses the configuration: {report['refused']}",
                       hint="this is sglang's own validation" + (f" for {target['count']} x {target['name']}"
                                                                  if target else ""))
    fields = report["fields"]
    implied, moved = follow_moves(implied_expectations(server, report["dests"], report["fields"]), report["fields"],
                                    version)
    expected = {**implied, **expect}
    problems = compare_fields(expected, fields, source=f"sglang {version} parser")
    # the recipe against itself: an [expect] (often inherited) that its own flags contradict
    problems += [f"{k}: [expect] says {expect[k]!r} but the recipe's [server.args] give {implied[k]!r} (an inherited "
                 "[expect]? `patchbench show RECIPE` names the file that set it)"
                 for k in expect if k in implied and not _same(expect[k], implied[k])]
    if err:
        problems.insert(0, err)
    outcome = report.get("outcome") or "ok"
    if not report.get("resolved") or report.get("resolve_error"):
        outcome = f"unresolved: {report.get('resolve_error') or 'no reason reported'}"
    return StaticCheck(ok=not problems, version=version, fields=fields, problems=problems,
                       resolved=bool(report.get("resolved")), note=None if outcome == "ok" else outcome,
                       implied=implied, resolved_config=report.get("resolved_config") or {}, target=target,
                       outcome=outcome, presented=report.get("presented"), warnings=moved)


# The effective config worth a line in the check's table, a diff between recipes and a comparison
# with /server_info after launch. Per-launch values (host, port, paths, seeds) are not here.
KEY_FIELDS = (
    "attention_backend", "prefill_attention_backend", "decode_attention_backend",
    "dsa_prefill_backend", "dsa_decode_backend",  # sglang 0.5.23's names for DeepSeek/GLM-5 sparse attention
    "nsa_prefill_backend", "nsa_decode_backend",  # their names until 0.5.10
    "moe_runner_backend", "moe_a2a_backend", "attn_dp_size",
    "quantization", "dtype", "kv_cache_dtype", "page_size", "chunked_prefill_size",
    "cuda_graph_max_bs", "cuda_graph_bs", "cuda_graph_config", "disable_cuda_graph", "max_running_requests",
    "mem_fraction_static", "tp_size", "ep_size", "dp_size", "pp_size", "enable_dp_attention",
    "enable_single_batch_overlap", "enable_two_batch_overlap", "speculative_algorithm", "sampling_backend",
    "disable_radix_cache", "context_length",
    # expert placement: EPLB (off by default in 0.5.23) moves experts every eplb_rebalance_num_iterations
    # forward passes counted from start, so a measured window can straddle a rebalance
    "enable_eplb", "init_expert_location", "ep_num_redundant_experts", "ep_dispatch_algorithm",
    "eplb_rebalance_num_iterations",
)
# Values that differ launch to launch, or that the scheduler adjusts after loading weights from the
# free memory it measures (CUDA graph sizes capped by the running-request limit, context length):
# shown and diffed, not held against /server_info.
PER_LAUNCH = frozenset({"host", "port", "model_path", "tokenizer_path", "served_model_name", "random_seed",
                        "nccl_port", "dist_init_addr", "file_storage_path", "download_dir", "log_dir",
                        "base_gpu_id", "max_total_tokens", "device", "cuda_graph_config", "cuda_graph_bs",
                        "max_running_requests", "context_length"})


def key_resolved(check: StaticCheck | None) -> dict:
    """The KEY_FIELDS of the resolved config that sglang resolved to a value."""
    cfg = check.resolved_config if check else {}
    return {k: cfg[k] for k in KEY_FIELDS if cfg.get(k) is not None}


def verify_resolved(check: StaticCheck | None, server_info: dict) -> list[str]:
    """The statically resolved key fields against what the launched server reports at /server_info
    (fields /server_info does not report are left out: versions nest some of them differently)."""
    want = {k: v for k, v in key_resolved(check).items() if k in server_info and k not in PER_LAUNCH}
    return compare_fields(want, server_info, source="/server_info (resolved statically for the target)")


def check_record(check: StaticCheck | None) -> dict:
    """What a run stores in its `extra` about its static check beyond the parsed fields: the outcome
    (`ok`, or `unresolved: ...`), what the probe presented to sglang, what was not checked."""
    if check is None:
        return {}
    return {"static_check_outcome": check.outcome, "static_check_presented": check.presented,
            "static_check_warnings": list(check.warnings)}


def server_info_problems(check: StaticCheck | None, expect: dict, server_info: dict) -> list[str]:
    """What a launched server's /server_info contradicts: the recipe's flags (as the static check
    parsed them) and `[expect]`, then the statically resolved key fields. Every launch path (the
    pipeline's verify step, `profile`) checks a server with this."""
    expected = {**(check.implied if check else {}), **dict(expect)}
    return compare_fields(expected, server_info, source="/server_info") + verify_resolved(check, server_info)


def resolved_table(check: StaticCheck) -> list[tuple[str, str]]:
    """(field, value) rows for the check's printout: the key resolved fields, or why there are none."""
    rows = [(k, _cuda_graphs(v) if k == "cuda_graph_config" else _short(v)) for k, v in key_resolved(check).items()]
    if check.shape.get("weights_per_gpu_gb") is not None:
        budget = check.shape.get("budget_gb")
        rows.append(("weights per GPU (patchbench)", f"{check.shape['weights_per_gpu_gb']:.1f} GB"
                     + (f" of {budget:.1f} GB budget" if budget else "")))
    return rows


def diff_resolved(configs: dict[str, dict]) -> list[tuple[str, list[str]]]:
    """Key fields whose resolved values differ between recipes: [(field, [value per recipe])]."""
    names = list(configs)
    rows = []
    for key in KEY_FIELDS:
        values = [configs[n].get(key) for n in names]
        if any(not _same(values[0], v) for v in values[1:]):
            rows.append((key, [_short(v) for v in values]))
    return rows


def _cuda_graphs(cfg) -> str:
    """0.5.23's nested cuda_graph_config as one line: per phase, the max batch and how many sizes."""
    if not isinstance(cfg, dict):
        return _short(cfg)
    parts = []
    for phase, c in cfg.items():
        if isinstance(c, dict):
            sizes = c.get("bs") or []
            parts.append(f"{phase} {c.get('backend')} max_bs {c.get('max_bs')} ({len(sizes)} sizes)")
    return "; ".join(parts) or _short(cfg)


def _short(value, limit: int = 60) -> str:
    text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def stand_in_model(recipe, workdir: Path) -> tuple[str | None, dict | None]:
    """A model path sglang can read `config.json` from, and that config: the real checkpoint's when
    present, else the roofline's config plus, for a checkpoint patchbench knows
    (toolkit/data/models/checkpoints/NAME.json), its quantization_config."""
    from toolkit.roofline import MODELS_DIR, load_model_config

    model = recipe.server.model
    if model and (Path(model) / "config.json").is_file():
        try:
            return model, load_model_config(model)[1]
        except PatchbenchError:
            return model, None
    ref = recipe.roofline.get("model")
    if not ref:
        return model, None
    try:
        _, cfg = load_model_config(ref)
    except PatchbenchError:
        return model, None
    checkpoint = MODELS_DIR / "checkpoints" / f"{Path(model or '').name}.json"
    if model and checkpoint.is_file():
        extra = json.loads(checkpoint.read_text())
        if extra.get("base") == ref:
            cfg = {**cfg, "quantization_config": extra["quantization_config"]}
    stand_in = workdir / "model"
    stand_in.mkdir(parents=True, exist_ok=True)
    (stand_in / "config.json").write_text(json.dumps(cfg))
    return str(stand_in), cfg


def check_recipe(python: Path, recipe, workdir: Path, *, environ: dict | None = None,
                 device: str | None = None) -> StaticCheck:
    """The static check of a recipe: sglang's parser, validation and defaults for the recipe's
    `[target]` (toolkit/probes/server_args.py), then patchbench's model-shape rules
    (toolkit/run/model_shape.py). Raises BadInput on a refusal or a broken shape rule."""
    from toolkit.recipe.target import target_facts
    from toolkit.run import machine
    from toolkit.run.release_rules import Where, release_rules
    from toolkit.run.model_shape import check_model_shape

    facts = target_facts(recipe.target) if recipe.target else None
    model, config = stand_in_model(recipe, workdir)
    check = static_check(python, recipe.server, dict(recipe.expect), environ=environ, model=model,
                         device=device, target=facts)
    if config is None:
        from toolkit.run.model_shape import RULES

        check.warnings.append(f"model-shape rules not run (no model config for {recipe.server.model!r}; "
                              f"set [roofline] model): {', '.join(RULES)}")
        return check
    args = {**check.fields, **check.resolved_config}
    where = Where((config.get("architectures") or [""])[0] or "",
                  tuple(facts["capability"]) if facts and facts.get("capability") else None,
                  machine.cpu_has_amx() if str(args.get("device")) == "cpu" else None)  # a CPU server runs here
    refused = release_rules(args, check.version, where, "load")
    if refused:
        raise BadInput(f"{refused[0]} (patchbench's rule, read against sglang's source: it refuses at load)",
                       hint="toolkit/run/release_rules.py")
    check.warnings.extend(release_rules(args, check.version, where, "inert"))
    shape = check_model_shape(config, args, weights=recipe.roofline.get("weights"),
                              memory_bytes=facts["memory_mib"] * (1 << 20) if facts else None,
                              gpu_count=facts["count"] if facts else None, environ=dict(recipe.server.env))
    check.shape = {"weights_per_gpu_gb": shape.weights_per_gpu_gb, "budget_gb": shape.budget_gb,
                   "notes": list(shape.notes)}
    if not shape.ok:
        raise BadInput("; ".join(v.text() for v in shape.violations))
    return check


def check_summary(check: StaticCheck) -> list[str]:
    """Lines for `run --until check`: the target and the key resolved fields (the outcome is printed
    by the caller, as a warning when unresolved)."""
    lines = []
    if check.target:
        t = check.target
        lines.append(f"  target: {t['count']} x {t['name']} (compute capability {t['capability'][0]}.{t['capability'][1]}, "
                     f"{t['memory_mib']} MiB)")
    width = max((len(k) for k, _ in resolved_table(check)), default=0)
    lines += [f"  {k:<{width}}  {v}" for k, v in resolved_table(check)]
    return lines
