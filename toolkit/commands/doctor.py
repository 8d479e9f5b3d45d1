"""`patchbench doctor [RECIPE]`: is this box fit for a campaign? One line per check (ok / warn /
fail / skip) with the fix; exit 1 when a check fails. Facts: toolkit.run.gpustate.facts; rules
(pure): toolkit.run.gpustate.doctor."""

from __future__ import annotations

from rich.markup import escape

from toolkit.commands.common import console, home_of, load, print_json, store_of

HELP = ("check the box before a campaign: persistence, power limits, clocks, ECC, processes, memory, P2P, CUPTI, CUDA, "
        "PCIe, host CPU")

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def add_arguments(parser) -> None:
    parser.add_argument("recipe", nargs="?", metavar="RECIPE",
                        help="judge the box for this recipe (its GPUs, mem-fraction-static, env's CUDA builds)")
    parser.add_argument("--json", action="store_true")


def run(args) -> int:
    from toolkit.run.gpustate.doctor import exit_code, run_rules
    from toolkit.run.gpustate.facts import gather

    recipe = load(args.recipe) if args.recipe else None
    runs = store_of(args).runs(recipe=recipe.name) if recipe is not None else []
    facts = gather(recipe, runs, home=home_of(args))
    checks = run_rules(facts)
    code = exit_code(checks)
    if args.json:
        print_json({"checks": [c.to_dict() for c in checks], "ok": code == 0, "facts": facts})
        return code
    for c in checks:
        line = f"[{_STYLE[c.status]}]{c.status:4}[/] {escape(c.name)}: {escape(c.message)}"
        if c.fix and c.status in ("warn", "fail"):
            line += f"\n       fix: {escape(c.fix)}"
        console.print(line, highlight=False, soft_wrap=True)  # one line per check, never folded
    return code
