"""patchbench: describe this interpreter (version, site dirs, package set, torch) as one JSON line.

Run by `toolkit.envs.steps.probe.probe_python` with the interpreter an env is built on; stdlib only."""
import hashlib, importlib.metadata as md, importlib.util, json, os, platform, re, sys
site_dirs = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)]
dists = sorted({(d.metadata["Name"] or "?").lower() + "==" + (d.version or "?") for d in md.distributions()})
torch = None
spec = importlib.util.find_spec("torch")
if spec and spec.submodule_search_locations:
    vfile = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    text = open(vfile).read() if os.path.exists(vfile) else ""
    def grab(name):
        m = re.search(r"^" + name + r"\s*(?::\s*[^=]+)?=\s*['\"]?([^'\"\n]+)['\"]?", text, re.M)
        return None if not m or m.group(1) == "None" else m.group(1)
    torch = {"version": grab("__version__"), "cuda": grab("cuda"), "path": os.path.dirname(vfile)}
print(json.dumps({
    "executable": sys.executable,
    "real_executable": os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
    "version": platform.python_version(),
    "implementation": platform.python_implementation(),
    "prefix": sys.prefix,
    "base_prefix": sys.base_prefix,
    "site_dirs": site_dirs,
    "dists": dists,
    "dists_sha256": hashlib.sha256("\n".join(dists).encode()).hexdigest(),
    "torch": torch,
}))
