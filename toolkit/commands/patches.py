"""`patchbench patches check|show|edit|export|rebase RECIPE`: inspect a recipe's patch stacks, and the
patch author's loop (toolkit/tree/stack.py, toolkit/tree/rebase.py)."""

from __future__ import annotations

from rich.table import Table

from toolkit.commands.common import console, home_of, load, print_json
from toolkit.errors import PatchbenchError
from toolkit.tree.lock import read_lock
from toolkit.tree.applied import check_plan, plan_source
from toolkit.errors import plural

HELP = ("check (zero fuzz, in order) or show a recipe's patch stacks; edit them as git commits, export them "
        "back as patches, rebase them onto another revision or release")


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=["check", "show", "edit", "export", "rebase"],
                        help="check/show: read only; edit: a git work tree at the applied head; export: its new or "
                             "amended commits -> patches/, the recipe's list and lock; rebase: port the stack --onto")
    parser.add_argument("recipe", metavar="RECIPE")
    parser.add_argument("--source", help="edit/export/rebase: which source's stack (default: the one with patches)")
    parser.add_argument("--onto", metavar="REV|VERSION", help="rebase: a git revision or a PyPI release")
    parser.add_argument("--in-place", action="store_true",
                        help="rebase: overwrite the patches and the recipe's source pin (default: a new recipe)")
    parser.add_argument("--name", help="rebase: name of the new recipe (default RECIPE-VERSION)")
    parser.add_argument("--continue", dest="cont", action="store_true", help="rebase: go on after resolving a conflict")
    parser.add_argument("--abort", action="store_true", help="rebase: give up and remove the rebase work tree")
    parser.add_argument("--json", action="store_true")


def run(args) -> int:
    recipe = load(args.recipe)
    if args.action in ("edit", "export", "rebase"):
        try:
            return _author(args, recipe, home_of(args))
        except PatchbenchError as exc:
            raise exc.located(recipe=recipe.name, step=f"patches {args.action}")
    home = home_of(args)
    rows = []
    failed = False
    try:
        lock = read_lock(recipe.lock_path)
        for source in recipe.sources:
            plan = plan_source(recipe, source, home, lock=lock)
            dispositions = check_plan(plan, home) if args.action == "check" else [None] * len(plan.patches)
            for info, d in zip(plan.patches, dispositions):
                failed |= d is not None and not d.ok
                rows.append({
                    "source": source,
                    "patch": info.name,
                    "subject": info.subject,
                    "sha256": info.sha256,
                    "files": [f.path for f in info.files],
                    "kinds": list(info.kinds),
                    "added": info.added,
                    "removed": info.removed,
                    "status": d.status if d else None,
                    "detail": d.detail if d else None,
                    "file": d.file if d else None,
                    "hunk": d.hunk if d else None,
                })
    except PatchbenchError as exc:
        raise exc.located(recipe=recipe.name, step=f"patches {args.action}")
    if args.json:
        print_json({"recipe": recipe.name, "patches": rows})
        return 1 if failed else 0
    table = Table(title=f"recipe {recipe.name}: patch stacks", title_justify="left")
    for col in ("#", "source", "patch", "kind", "+/-", "status", "where / why"):
        table.add_column(col, overflow="fold")
    for i, r in enumerate(rows, 1):
        status = r["status"] or ""
        style = {"applies": "green", "already-applied": "yellow"}.get(status, "red") if status else ""
        where = " ".join(x for x in (r["file"], r["hunk"], r["detail"]) if x) if r["status"] != "applies" else ""
        moved = f" ({r['detail']})" if r["status"] == "applies" and r["detail"] else ""  # a hunk whose context moved
        table.add_row(str(i), r["source"], r["patch"], ",".join(r["kinds"]), f"+{r['added']}/-{r['removed']}",
                      f"[{style}]{status}[/]" if style else status, (where or r["subject"]) + moved)
    if not rows:
        console.print(f"recipe {recipe.name}: no patches")
    else:
        console.print(table)
    return 1 if failed else 0


def _author(args, recipe, home) -> int:
    from toolkit.tree import rebase, stack
    from toolkit.errors import BadInput

    if args.action == "edit":
        work = stack.edit(recipe, args.source, home)
        console.print(f"work tree for {recipe.name} ({work.source}, {plural(len(work.patches), 'patch')}, one commit each):")
        print(work.path)
        console.print(f"  cd {work.path}; edit; git commit -a   (a new patch; `git commit --amend` or "
                      f"`git rebase -i` changes one)\n  then: patchbench patches export {recipe.name}")
        return 0
    if args.action == "export":
        written = stack.export(recipe, args.source, home)
        if not written:
            console.print(f"{recipe.name}: nothing new to export")
        for name, what in written:
            console.print(f"{what:>8} patches/{name}")
        if written:
            console.print(f"recipe {recipe.name}: patch list and lock updated; `patchbench run {recipe.name}` measures it")
        return 0
    if not args.onto:
        raise BadInput("rebase needs --onto REV|VERSION")
    if args.abort or args.cont:
        result = rebase.resume(recipe, args.source, args.onto, home, abort=args.abort)
        if result is None:
            console.print(f"rebase of {recipe.name} onto {args.onto} aborted")
            return 0
    else:
        result = rebase.start(recipe, args.source, args.onto, home, in_place=args.in_place, name=args.name)
    for name, how in result.patches:
        console.print(f"{how:>13} patches/{name}")
    console.print(f"recipe {result.recipe} holds the stack on {args.onto} (lock written)")
    return 0
