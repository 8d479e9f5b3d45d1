"""patchbench: which FlashInfer distributions, modules and AOT directories this env holds (one JSON line).

Run by `toolkit.envs.steps.flashinfer.check_no_flashinfer_aot` with the env's interpreter; stdlib only."""
import importlib.metadata as md, importlib.util, json, os
dists = []
for d in md.distributions():
    name = (d.metadata["Name"] or "").lower().replace("_", "-")
    if name.startswith("flashinfer"):
        dists.append({"name": name, "version": d.version, "location": str(d.locate_file(""))})
mods = {}
for m in ("flashinfer_jit_cache", "flashinfer_cubin", "flashinfer"):
    try:
        s = importlib.util.find_spec(m)
    except Exception:
        s = None
    mods[m] = None if s is None else (list(s.submodule_search_locations or []) or [s.origin])
aot = []
if mods["flashinfer"]:
    d = os.path.join(mods["flashinfer"][0], "data", "aot")
    if os.path.isdir(d):
        aot = sorted(os.listdir(d))
print(json.dumps({"dists": dists, "modules": mods, "aot": aot}))
