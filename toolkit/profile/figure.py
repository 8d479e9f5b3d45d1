"""The report's stacked bar: per recipe, decode step time split by kernel family, with the sum of
the families' roofline floors drawn as a marker on each bar (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

from toolkit.errors import BadInput
from toolkit.profile.families import IDLE, labels as family_labels


def stacked_bar(recipes: dict[str, dict], out: str | Path, *, families=(), floors_ms: dict[str, float] | None = None,
                title: str = "decode step by kernel family") -> Path:
    """Write a PNG/SVG (by suffix) with one bar per recipe. `recipes`: name -> mean ms per family
    (e.g. a Breakdown's family_ms()); `floors_ms`: name -> roofline floor of the whole step."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BadInput("the stacked bar needs matplotlib", hint="pip install matplotlib") from None
    names = family_labels(tuple(families))
    fams = sorted({f for ms in recipes.values() for f in ms}, key=lambda f: (f == IDLE, f))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(recipes) + 3), 4.5))
    xs = range(len(recipes))
    bottoms = [0.0] * len(recipes)
    cmap = plt.get_cmap("tab20")
    for i, fam in enumerate(fams):
        vals = [recipes[r].get(fam, 0.0) for r in recipes]
        ax.bar(xs, vals, bottom=bottoms, label=names.get(fam, fam),
               color="#dddddd" if fam == IDLE else cmap(i % 20), edgecolor="white", linewidth=0.5)
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    for x, r in zip(xs, recipes):
        floor = (floors_ms or {}).get(r)
        if floor is not None:
            ax.plot([x - 0.4, x + 0.4], [floor, floor], color="black", linewidth=2,
                    label="roofline floor" if x == 0 else None)
    ax.set_xticks(list(xs), list(recipes), rotation=15, ha="right")
    ax.set_ylabel("ms per decode step")
    ax.set_title(title)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
