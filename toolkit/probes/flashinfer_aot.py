"""patchbench: compile one FlashInfer JIT module ahead of time and install it as AOT.

    python flashinfer_aot.py NAME [--only PATTERN]

With --only, compile just the module's translation units whose source matches PATTERN (a glob on
the file name or path, e.g. `*_128_32_64.cu`) through the module's own ninja file, and report the
objects; nothing is linked or installed. Run by `toolkit.envs.steps.flashinfer` with the env's Python.
"""
import fnmatch, hashlib, importlib, json, os, pkgutil, shutil, subprocess, sys, time, traceback

name = sys.argv[1]
only = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--only" else None
try:
    import flashinfer.jit as J
    from flashinfer.jit import env as jit_env
except Exception as e:
    traceback.print_exc()
    print(f"PATCHBENCH_ERROR cannot import flashinfer.jit in this env ({type(e).__name__}: {e})")
    sys.exit(3)


def candidates(name):
    if ":" in name:
        mod, _, fn = name.partition(":")
        yield importlib.import_module(mod), fn
        return
    fns = [name] if name.startswith("gen_") else [f"gen_{name}_module", name]
    mods = [J]
    try:
        mods.append(importlib.import_module(f"flashinfer.jit.{name}"))
    except ImportError:
        pass
    for m in mods:
        for fn in fns:
            yield m, fn
    for info in pkgutil.walk_packages(J.__path__, "flashinfer.jit."):
        try:
            m = importlib.import_module(info.name)
        except Exception:
            continue
        for fn in fns:
            yield m, fn


gen = where = None
for mod, fn in candidates(name):
    f = getattr(mod, fn, None)
    if callable(f):
        gen, where = f, f"{mod.__name__}.{fn}"
        break
if gen is None:
    print(f"PATCHBENCH_ERROR no FlashInfer JIT generator for {name!r} (tried gen_{name}_module "
          "in flashinfer.jit and its submodules; a full name `module:function` also works)")
    sys.exit(3)
try:
    spec = gen()
except TypeError as e:
    print(f"PATCHBENCH_ERROR {where}() needs arguments ({e}); only argument-free generators can "
          "be named in build.kernels")
    sys.exit(3)
if not hasattr(spec, "jit_library_path"):
    print(f"PATCHBENCH_ERROR {where}() returned a {type(spec).__name__}, not an nvcc JIT spec")
    sys.exit(3)
print(f"patchbench: {where}() -> module {spec.name}, sources:", *map(str, spec.sources), sep="\n  ")
t0 = time.time()
if only is not None:
    spec.write_ninja()
    targets = []  # (object, source) of the ninja file's compile edges that match
    for line in spec.ninja_path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "build" and parts[2] in ("cuda_compile", "compile"):
            obj, src = parts[1].rstrip(":"), parts[3]
            if fnmatch.fnmatch(os.path.basename(src), only) or fnmatch.fnmatch(src, only):
                targets.append((obj, src))
    if not targets:
        print(f"PATCHBENCH_ERROR no source of module {spec.name} matches {only!r} (its sources: "
              + ", ".join(os.path.basename(str(s)) for s in spec.sources) + ")")
        sys.exit(3)
    jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
    argv = ["ninja", "-v", "-C", str(spec.build_dir), "-f", str(spec.ninja_path), "-j", jobs,
            *[o for o, _ in targets]]
    print("patchbench: " + " ".join(argv), flush=True)
    subprocess.run(argv, check=True, cwd=str(spec.build_dir))
    print("PATCHBENCH_KERNEL " + json.dumps({
        "name": name, "generator": where, "module": spec.name, "only": only,
        "objects": [{"source": s, "object": o} for o, s in targets],
        "seconds": round(time.time() - t0, 1),
    }))
    sys.exit(0)
spec.build(verbose=True)
lib = spec.jit_library_path
aot = jit_env.FLASHINFER_AOT_DIR / spec.name / f"{spec.name}.so"
aot.parent.mkdir(parents=True, exist_ok=True)
tmp = aot.with_name(f".{aot.name}.tmp")
shutil.copy2(lib, tmp)
tmp.replace(aot)  # atomic: a process loading the module never sees half a file
print("PATCHBENCH_KERNEL " + json.dumps({
    "name": name, "generator": where, "module": spec.name, "jit": str(lib), "aot": str(aot),
    "sha256": hashlib.sha256(aot.read_bytes()).hexdigest(), "seconds": round(time.time() - t0, 1),
}))
