"""The doctor's rules (pure): a facts dict (toolkit.run.gpustate.facts.gather) -> one `Check` per
line, `ok` / `warn` / `fail` / `skip`, each not-ok one with the command that fixes it.

Checks: the recipe's GPUs visible (its layout within CUDA_VISIBLE_DEVICES); the readings NVML gave
(and any deprecated getter used for want of its successor); persistence mode; equal power limits (and
at the default); application clocks; locked clocks (NVML has no getter: said, or a clock setting seen
holding the clocks); ECC; other processes (foreign compute, graphics apart, unmatchable pids said); free memory against `mem-fraction-static`; P2P and topology;
CUPTI access for `profile`; the driver's CUDA against the env's torch / sgl-kernel builds; PCIe
generation and width; the host's CPU (other processes' CPU time and the hypervisor's steal over a
second, judged by the run's own host flags, toolkit.results.box_flags); other patchbench campaigns on the
box and stray servers dead ones left (facts "jobs": a pid of theirs is named as such, and never given to
`kill` while its campaign runs). `RULES` is the order they print in; `exit_code(checks)` is 1 when one fails.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from toolkit.run.gpustate.nvml import CLOCK_SETTING_BIT, GETTERS

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
CORE_READINGS = ("sm_mhz", "mem_mhz", "power_w", "temp_c", "reasons")


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    message: str
    fix: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _gpus(f: dict) -> list[dict]:
    return (f.get("nvml") or {}).get("gpus") or []


def _ids(gpus: list[dict]) -> str:
    return ",".join(str(g["index"]) for g in gpus)


def gpus_present(f: dict) -> Check:
    nv = f.get("nvml") or {}
    recipe = f.get("recipe") or {}
    needs = recipe.get("gpus", 1) != 0
    if not nv.get("available"):
        return Check("gpus", FAIL if needs else WARN, f"no GPU state: {nv.get('reason') or 'NVML unavailable'}",
                     "install the NVIDIA driver and nvidia-ml-py (pip install nvidia-ml-py)" if needs else "")
    scope = nv.get("scope") or {}
    visible = scope.get("cuda_visible_devices")
    fix = "name GPUs as CUDA does: an index, GPU-<uuid> or MIG-<uuid> (nvidia-smi -L lists them)"
    if visible is not None and not scope.get("visible_count"):
        return Check("gpus", FAIL if needs else WARN, f"CUDA_VISIBLE_DEVICES={visible} matches no NVIDIA GPU", fix)
    if needs and scope.get("missing_positions"):
        return Check("gpus", FAIL, f"the recipe's layout ({recipe.get('layout', '?')}) uses CUDA device(s) "
                                   f"{','.join(map(str, scope['missing_positions']))} but {scope.get('visible_count')} "
                                   "are visible", "lower base-gpu-id / tp-size or make more GPUs visible")
    names = sorted({g.get("name") or "?" for g in _gpus(f)})
    which = ", ".join(f"CUDA {d['cuda']} = GPU {d['index']}" + (f" ({d['mig']})" if d.get("mig") else "")
                      for d in scope.get("devices") or [])
    text = (f"{len(_gpus(f))} GPU(s) for {recipe['name'] + ' (' + recipe.get('layout', '') + ')' if recipe else 'this box'}"
            f"{': ' + which if which else ''}; {', '.join(names) or 'none'}; driver {nv.get('driver')} "
            f"(CUDA {nv.get('cuda_driver')})")
    notes = list(scope.get("notes") or [])
    if scope.get("unmatched"):
        notes.insert(0, f"CUDA_VISIBLE_DEVICES entries {','.join(scope['unmatched'])} match no GPU (CUDA stops there)")
        return Check("gpus", WARN, text + "; " + "; ".join(notes), fix)
    if any("CUDA_DEVICE_ORDER" in n for n in notes):
        return Check("gpus", WARN, text + "; " + "; ".join(notes), "export CUDA_DEVICE_ORDER=PCI_BUS_ID")
    return Check("gpus", OK, text + ("; " + "; ".join(notes) if notes else ""))


def readings(f: dict) -> Check:
    missing = [(g["index"], k, why) for g in _gpus(f) for k, why in (g.get("unread") or {}).items()
               if k != "locked_clocks"]
    successors = {alts[0][0] for alts in GETTERS.values()}
    # a deprecated getter in use because the driver's NVML lacks its successor (an older driver) is no binding problem
    old_driver = sorted({name for g in _gpus(f) for name in (g.get("driver_lacks") or {}).values()})
    old = sorted({name for g in _gpus(f) for k, name in (g.get("getters") or {}).items()
                  if name not in successors and k not in (g.get("driver_lacks") or {})})
    core = [m for m in missing if m[1] in CORE_READINGS]
    grouped: dict[tuple[str, str], list[int]] = {}
    for i, k, why in missing:
        grouped.setdefault((k, why), []).append(i)
    listed = "; ".join(f"{k} on GPU {','.join(map(str, ids))} ({why})" for (k, why), ids in list(grouped.items())[:6])
    if core or old:
        text = (f"not read: {listed}" if missing else "") + ("; " if missing and old else "")
        text += f"deprecated getter(s) used, this nvidia-ml-py lacks their successors: {', '.join(old)}" if old else ""
        return Check("readings", WARN, text, "pip install -U nvidia-ml-py" if old else "")
    drv = (f"; the driver's NVML lacks {', '.join(old_driver)}: the deprecated getters read those (a later "
           "nvidia-ml-py without them will not, on this driver)") if old_driver else ""
    return Check("readings", OK, "every reading the runs sample was read" + (f"; not reported: {listed}" if missing else "")
                 + drv)


def persistence(f: dict) -> Check:
    off = [g for g in _gpus(f) if g.get("persistence") is False]
    if off:
        return Check("persistence", WARN, f"persistence mode off on GPU {_ids(off)}: each launch re-initialises the driver",
                     "sudo nvidia-smi -pm 1")
    return Check("persistence", OK, "persistence mode on")


def power_limits(f: dict) -> Check:
    limits = {g["index"]: g.get("power_limit_w") for g in _gpus(f)}
    known = {i: v for i, v in limits.items() if v is not None}
    if not known:
        return Check("power limit", SKIP, "power limit not reported")
    if len(set(known.values())) > 1:
        top = max(known.values())
        low = [i for i, v in known.items() if v != top]
        return Check("power limit", FAIL, "power limits differ: " + ", ".join(f"GPU {i} {v:.0f} W" for i, v in known.items()),
                     f"sudo nvidia-smi -i {','.join(map(str, low))} -pl {top:.0f}")
    below = [g for g in _gpus(f) if g.get("default_power_limit_w") and g.get("power_limit_w")
             and g["power_limit_w"] < g["default_power_limit_w"]]
    value = next(iter(known.values()))
    if below:
        return Check("power limit", WARN, f"power limit {value:.0f} W on every GPU, below the default "
                                          f"{below[0]['default_power_limit_w']:.0f} W (record it with the results)",
                     f"sudo nvidia-smi -pl {below[0]['default_power_limit_w']:.0f}")
    return Check("power limit", OK, f"{value:.0f} W on every GPU")


def clocks(f: dict) -> Check:
    set_ = []
    for g in _gpus(f):
        app, default = g.get("app_clocks") or {}, g.get("default_app_clocks") or {}
        if app.get("sm") is not None and default.get("sm") is not None and app != default:
            set_.append(g)
    if set_:
        values = {str(g["app_clocks"]) for g in set_}
        status = FAIL if len(values) > 1 or len(set_) != len(_gpus(f)) else WARN
        return Check("clocks", status, f"application clocks set on GPU {_ids(set_)} "
                                       f"({', '.join(sorted(values))}): results hold only at these clocks",
                     "sudo nvidia-smi -rac (reset) or set the same on every GPU")
    return Check("clocks", OK, "default application clocks (no clocks set)")


def locked_clocks(f: dict) -> Check:
    held = [g for g in _gpus(f) if (g.get("reasons_now") or 0) & CLOCK_SETTING_BIT]
    fix = "sudo nvidia-smi -rgc && sudo nvidia-smi -rmc (reset locked clocks), or record the lock with the results"
    if held:
        return Check("locked clocks", WARN, f"a clock setting holds the clocks of GPU {_ids(held)} now (NVML's "
                                            "applications-clocks-setting reason: application or locked clocks)", fix)
    why = next((g["unread"]["locked_clocks"] for g in _gpus(f) if "locked_clocks" in (g.get("unread") or {})),
               "NVML has no getter for locked clocks")
    return Check("locked clocks", SKIP, f"cannot see locked clocks (nvidia-smi -lgc / -lmc): {why}; a run records the "
                                        "share of its window a clock setting held the clocks (clock_setting_share)", fix)


def ecc(f: dict) -> Check:
    errors = [g for g in _gpus(f) if g.get("ecc_uncorrected")]
    if errors:
        return Check("ecc", FAIL, "uncorrected ECC errors on GPU " + ", ".join(f"{g['index']} ({g['ecc_uncorrected']})" for g in errors),
                     "drain the GPU and reset it (sudo nvidia-smi -r -i N) or replace it")
    modes = {g.get("ecc_mode") for g in _gpus(f)} - {None}
    if len(modes) > 1:
        return Check("ecc", WARN, "ECC on for some GPUs and off for others", "sudo nvidia-smi -e 1 (then reboot)")
    return Check("ecc", OK, "no uncorrected ECC errors" + (f"; ECC {'on' if modes == {True} else 'off'}" if modes else ""))


def _plist(pairs: list) -> str:
    return ", ".join(f"pid {p['pid']} on GPU {i}" + (f" ({p['used_mib']} MiB)" if p.get("used_mib") else "")
                     for i, p in pairs[:5])


def _job_of(pid: int, f: dict) -> dict | None:
    """The patchbench job (facts "jobs": another campaign's, or a stray group a dead one left) `pid` is of."""
    return next((j for j in f.get("jobs") or [] if pid in j.get("pids", ())), None)


def _whose(pid: int, f: dict) -> str:
    job = _job_of(pid, f)
    if job is None:
        return ""
    run = f" run {job['run_id'][:8]}" if job.get("run_id") else ""
    return (f" [patchbench pid {job['owner']}{run}: another campaign running]" if job["alive"]
            else f" [a stray of patchbench pid {job['owner']}{run}, gone]")


def _stop_them(pids: list[int], f: dict) -> str:
    """The fix for busy pids: kill the strangers and the strays' groups, wait for other campaigns (killing
    their server fails their run)."""
    jobs = [_job_of(p, f) for p in pids]
    strangers = [str(p) for p, j in zip(pids, jobs) if j is None]
    strays = sorted({j["pgid"] for j in jobs if j is not None and not j["alive"]})
    live = sorted({j["owner"] for j in jobs if j is not None and j["alive"]})
    parts = ([f"kill {' '.join(strangers)}"] if strangers else []) + \
        [f"kill -- -{g} (a server whose patchbench died; `patchbench run` on its home reaps it)" for g in strays] + \
        ([f"wait for patchbench pid {', '.join(map(str, live))}: another campaign on this box (do not kill its "
          "server: its run would fail)"] if live else [])
    return "; ".join(parts)


def patchbench_jobs(f: dict) -> Check:
    """Other patchbench campaigns on this box, and groups dead ones left (facts "jobs")."""
    jobs = f.get("jobs") or []
    live = [j for j in jobs if j["alive"]]
    strays = [j for j in jobs if not j["alive"]]
    if not jobs:
        return Check("patchbench jobs", OK, "no other patchbench campaign or stray server on this box")
    said = [f"patchbench pid {j['owner']}" + (f" (run {j['run_id'][:8]})" if j.get("run_id") else "")
            + f" runs a server (process group {j['pgid']})" for j in live] + \
        [f"process group {j['pgid']} was launched by patchbench pid {j['owner']}, which is gone: a stray" for j in strays]
    fix = ("wait for the other campaign: its launches and yours would share the box (measured: run's box column "
           "flags it)" if live else "") + ("; " if live and strays else "") + \
        ("kill -- -PGID for each stray, or run `patchbench run` on its home (it reaps them)" if strays else "")
    return Check("patchbench jobs", WARN, "; ".join(said), fix)


def processes(f: dict) -> Check:
    busy = [(g["index"], p) for g in _gpus(f) for p in g.get("processes") or []]
    graphics = [(g["index"], p) for g in _gpus(f) for p in g.get("graphics") or []]
    unmatched = [(g["index"], p) for g in _gpus(f) for p in g.get("unmatched") or []]
    refused = [(g["index"], why) for g in _gpus(f) for why in (g.get("processes_unread") or [])[:1]]
    also = f"; graphics (not counted): {_plist(graphics)}" if graphics else ""
    if busy:
        named = ", ".join(f"pid {p['pid']} on GPU {i}" + (f" ({p['used_mib']} MiB)" if p.get("used_mib") else "")
                          + _whose(p["pid"], f) for i, p in busy[:5])
        return Check("processes", WARN, f"{len(busy)} other process(es) on the GPUs: {named}{also}",
                     "stop them before the campaign: " + _stop_them([p["pid"] for _, p in busy[:5]], f))
    if unmatched:
        return Check("processes", WARN, f"{len(unmatched)} compute process(es) on the GPUs ({_plist(unmatched)}) whose "
                                        f"pids cannot be matched: {(f.get('nvml') or {}).get('pid_match')}{also}",
                     "check from the host (nvidia-smi) that no other job uses these GPUs")
    if refused:
        return Check("processes", WARN, f"NVML did not list the processes of GPU {', '.join(str(i) for i, _ in refused)} "
                                        f"({refused[0][1]}): other jobs there cannot be seen{also}",
                     "run the doctor as a user NVML lets read processes (root), or check from the host (nvidia-smi)")
    return Check("processes", OK, "no other compute process on the GPUs" + also)


def free_memory(f: dict) -> Check:
    frac = (f.get("recipe") or {}).get("mem_fraction_static")
    if frac is None:
        return Check("free memory", SKIP, "no recipe mem-fraction-static to check against")
    short = [g for g in _gpus(f) if g.get("mem_total_mib") and g.get("mem_free_mib") is not None
             and g["mem_free_mib"] < frac * g["mem_total_mib"]]
    if short:
        g = short[0]
        return Check("free memory", FAIL, f"GPU {_ids(short)}: {g['mem_free_mib'] / g['mem_total_mib']:.0%} free, the "
                                          f"recipe's mem-fraction-static {frac} needs {frac:.0%}",
                     "free the GPUs (see processes) or lower server.args.mem-fraction-static")
    return Check("free memory", OK, f"every GPU has at least {frac:.0%} free (mem-fraction-static {frac})")


def p2p(f: dict) -> Check:
    pairs = (f.get("nvml") or {}).get("pairs") or []
    if not pairs:
        return Check("p2p", SKIP, "one GPU: no peer traffic")
    bad = [p for p in pairs if p.get("p2p") is False]
    links = sorted({p.get("link") or "?" for p in pairs})
    if bad:
        return Check("p2p", WARN, f"P2P unavailable between {len(bad)} of {len(pairs)} GPU pairs (e.g. {bad[0]['a']}-{bad[0]['b']}): "
                                  f"all-reduce goes through host memory; links: {', '.join(links)}",
                     "enable IOMMU passthrough / ACS off in the BIOS, or expect slower TP all-reduce")
    return Check("p2p", OK, f"P2P between every pair; links: {', '.join(links)}")


def cupti(f: dict) -> Check:
    c = f.get("cupti") or {}
    if c.get("admin_only") and not c.get("root"):
        return Check("cupti", WARN, "GPU profiling is restricted to admins: `patchbench profile` gets no kernels",
                     "options nvidia NVreg_RestrictProfilingToAdminUsers=0 in /etc/modprobe.d/, then reboot (or run as root)")
    if c.get("admin_only") is None:
        return Check("cupti", SKIP, "profiling permission unknown (no /proc/driver/nvidia/params)")
    return Check("cupti", OK, "GPU profiling allowed for this user")


def _version(text: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in str(text).split(".")[:2])
    except ValueError:
        return None


def cuda_builds(f: dict) -> Check:
    driver = _version((f.get("nvml") or {}).get("cuda_driver"))
    env = f.get("env_cuda") or {}
    builds = {k: v for k, v in env.items() if k != "run"}
    if not builds and env.get("run"):
        return Check("cuda", SKIP, f"the env of run {env['run']} (the recipe's newest) has no CUDA build (a CPU torch)")
    if not builds:
        return Check("cuda", SKIP, "no env recorded for the recipe (run it once)")
    if driver is None:
        return Check("cuda", SKIP, "driver CUDA version unknown")
    newer = {k: v for k, v in builds.items() if _version(v) and _version(v) > driver}
    text = ", ".join(f"{k} {v}" for k, v in builds.items())
    if any(_version(v)[0] > driver[0] for v in newer.values()):
        return Check("cuda", FAIL, f"driver supports CUDA {'.'.join(map(str, driver))}; the env was built for {text}",
                     "upgrade the driver, or build the env with a torch for this CUDA (e.g. the cu12x index)")
    if newer:
        return Check("cuda", WARN, f"driver CUDA {'.'.join(map(str, driver))} is older than {text} (minor-version "
                                   "compatibility only: PTX JIT and new kernels may fail)", "upgrade the driver")
    return Check("cuda", OK, f"driver CUDA {'.'.join(map(str, driver))} runs {text}")


def pcie(f: dict) -> Check:
    gpus = [g for g in _gpus(f) if (g.get("pcie") or {}).get("max_width")]
    if not gpus:
        return Check("pcie", SKIP, "PCIe link not reported")
    narrow = [g for g in gpus if g["pcie"]["max_width"] < 16]
    gens = {g["pcie"].get("max_gen") for g in gpus} - {None}  # a GPU that does not say is not another generation
    if narrow:
        return Check("pcie", WARN, f"GPU {_ids(narrow)} link at most x{narrow[0]['pcie']['max_width']} (not x16)",
                     "reseat the card in an x16 slot; check the BIOS bifurcation setting")
    if len(gens) > 1:
        return Check("pcie", WARN, f"PCIe generations differ across GPUs: {sorted(gens)}",
                     "check the slots and BIOS PCIe speed settings")
    gen = f"Gen{next(iter(gens))}" if gens else "generation not reported,"
    return Check("pcie", OK, f"{gen} x16 on every GPU (the link idles lower; runs record it under load)")


def host_cpu(f: dict) -> Check:
    from toolkit.results.box_flags import host_flags

    h = f.get("host") or {}
    if not h.get("available"):
        return Check("host cpu", SKIP, h.get("reason") or "the host's CPU times were not read")
    flags = host_flags(h)
    if flags:
        pids = [p["pid"] for p in h.get("foreign_top") or []]
        named = [f"pid {p}{_whose(p, f)}" for p in pids if _job_of(p, f)]
        return Check("host cpu", WARN, "; ".join([*flags, *named]),
                     "wait for the other jobs or stop them before the campaign: sglang's scheduler and the benchmark "
                     "client need their CPUs" + (f" ({_stop_them(pids, f)})" if pids else ""))
    return Check("host cpu", OK, f"other processes used {h['foreign_cores']:.2f} of {h['cpus']} CPUs over "
                                 f"{h['window_s']:.0f} s; steal {100 * h['steal_share']:.1f}%")


RULES = (gpus_present, readings, persistence, power_limits, clocks, locked_clocks, ecc, processes, free_memory, p2p,
         cupti, cuda_builds, pcie, host_cpu, patchbench_jobs)
_NAMES = {"power_limits": "power limit", "free_memory": "free memory", "locked_clocks": "locked clocks",
          "host_cpu": "host cpu"}
GPU_RULES = {readings, persistence, power_limits, clocks, locked_clocks, ecc, processes, free_memory, p2p, pcie}


def run_rules(facts: dict) -> list[Check]:
    """Every rule over `facts`; without GPU state the per-GPU rules say so once (skip)."""
    nv = facts.get("nvml") or {}
    available = bool(nv.get("available"))
    why = "no GPU state" if not available else "no GPU of the run visible" if not nv.get("gpus") else ""
    out = []
    for rule in RULES:
        if rule in GPU_RULES and why:
            out.append(Check(_NAMES.get(rule.__name__, rule.__name__), SKIP, why))
        else:
            out.append(rule(facts))
    return out


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.status == FAIL for c in checks) else 0
