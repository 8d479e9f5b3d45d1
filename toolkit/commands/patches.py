"""`patchbench patches check|show RECIPE`: the stack's disposition per patch, changing nothing."""

from __future__ import annotations

from rich.table import Table

from toolkit.commands.common import console, home_of, load, print_json
from toolkit.errors import PatchbenchError
from toolkit.lock import read_lock
from toolkit.tree import check_plan, plan_source

HELP = "check (zero fuzz, in order) or show the patch stacks of a recipe without changing anything"


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=["check", "show"])
    parser.add_argument("recipe", metavar="RECIPE")
    parser.add_argument("--json", action="store_true")


def run(args) -> int:
    recipe = load(args.recipe)
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
        table.add_row(str(i), r["source"], r["patch"], ",".join(r["kinds"]), f"+{r['added']}/-{r['removed']}",
                      f"[{style}]{status}[/]" if style else status, where or r["subject"])
    if not rows:
        console.print(f"recipe {recipe.name}: no patches")
    else:
        console.print(table)
    return 1 if failed else 0
