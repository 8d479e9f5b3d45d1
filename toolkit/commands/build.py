"""`patchbench build RECIPE [--kernels NAME...]`: apply, then build the content-addressed env
(reused with zero work when nothing changed) and optionally compile FlashInfer JIT modules ahead of
time for the recipe's arches, without a GPU."""

from __future__ import annotations

from toolkit.commands.common import console, err, home_of, load, print_json
from toolkit.errors import BadInput, PatchbenchError

HELP = "build the recipe's env (content-addressed; identical inputs cost nothing) and, with --kernels, SM120 kernels"


def add_arguments(parser) -> None:
    parser.add_argument("recipe", metavar="RECIPE")
    parser.add_argument("--kernels", nargs="+", default=None, metavar="NAME",
                        help="FlashInfer JIT modules to compile ahead of time (e.g. norm, gen_gemm_sm120_module_cutlass_fp4)")
    parser.add_argument("--only", metavar="PATTERN",
                        help="with --kernels: compile only the module's sources matching this glob "
                             "(e.g. '*_128_32_64.cu'), check each object's arch, report the time")
    parser.add_argument("--frozen", action="store_true", help="refuse drift from the recipe's lock file")
    parser.add_argument("--json", action="store_true")


def run(args) -> int:
    from toolkit.envs import build_kernel_units, build_kernels
    from toolkit.run.pipeline import prepare

    if args.only and not args.kernels:
        raise BadInput("--only needs --kernels GENERATOR (the module whose sources it selects)")
    recipe = load(args.recipe)
    home = home_of(args)
    p = prepare(recipe, home, until="build", frozen=args.frozen, console=err)
    names = list(args.kernels or recipe.build.kernels)
    kernels = {}
    if names:
        try:
            if args.only:
                return _report_units(recipe.name, p.env, build_kernel_units(
                    p.env, recipe.build, names, args.only, home=home, console=err), args.json)
            kernels = build_kernels(p.env, p.trees, recipe.build, names, home=home, console=err)
        except PatchbenchError as exc:
            raise exc.located(recipe=recipe.name, step="kernels")
    if args.json:
        print_json({"recipe": recipe.name, "env": str(p.env.path), "key": p.env.key, "reused": p.env.reused,
                    "kernels": kernels})
        return 0
    state = "reused (no work)" if p.env.reused else "built"
    console.print(f"recipe {recipe.name}: env {p.env.key[:16]} {state}: {p.env.path}")
    for name, info in kernels.items():
        console.print(f"  kernel {name}: {info}")
    return 0


def _report_units(recipe: str, env, built: dict, as_json: bool) -> int:
    if as_json:
        print_json({"recipe": recipe, "env": str(env.path), "key": env.key, "units": built})
        return 0
    for name, info in built.items():
        if name.startswith("_"):
            continue
        console.print(f"kernel {name} ({info['module']}): {len(info['objects'])} unit(s) matching "
                      f"{info['only']} compiled in {info['seconds']:.1f} s")
        for o in info["objects"]:
            console.print(f"  {o['source']} -> {o['object']}: {', '.join(o['arches'])}")
    return 0
