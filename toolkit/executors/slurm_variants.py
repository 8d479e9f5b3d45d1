"""Variants measured on Slurm (bisect probes, attribution prefixes): each call to `measure` is one
job on one node (prepare the variant there, then the runs), so bisect keeps its log2 structure and
asks for the next probe as soon as the answer is in. The runs land in the submitting side's store
as the job ends; values come back in the job's done.json. Attribution knows all its variants up
front: `submit_ahead` sends them at once, to run on as many nodes in parallel."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from toolkit.analysis.variants import VariantMeter
from toolkit.executors.config import ClusterConfig, for_recipes
from toolkit.executors.job import VariantJob, direct_store, run_variant_job
from toolkit.executors.slurm import read_json, submit, wait
from toolkit.results.jobs import DONE_NAME


@dataclass
class SlurmVariantMeter(VariantMeter):
    """A VariantMeter whose measurements run as Slurm jobs (no values reused from earlier commands:
    the node reuses its trees and envs, the runs are new). A search (a bisect) never continues or
    replays an earlier sweep of itself through Slurm, as a local one does: each job decides nothing
    about campaigns but reads this call's sweep. The first measure looks for such a sweep (killed or
    finished) and says that this call measures again in its own new sweep (`not_continued`)."""

    cfg: ClusterConfig = field(default_factory=ClusterConfig)
    command: str = "bisect"
    _pending: dict = field(default_factory=dict)  # (label, repeats) -> JobRecord submitted ahead
    # the earlier sweep of this search this call did not continue or replay: {"sweep", "finished"}; None: none
    not_continued: dict | None = None

    def _submit(self, label: str, overrides: dict, repeats: int, recipe=None):
        job = VariantJob(recipe=recipe or self.recipe, spec=self.spec, label=label, overrides=overrides, repeats=repeats,
                         group_id=self.group_id, node_home=self.cfg.node_home,
                         missing_evidence=self.missing_evidence, store_url=direct_store(self.store),
                         design=self.design, search=self.search,
                         handed=tuple(rid for _, _, _, ids in self.log for rid in ids))
        return submit(run_variant_job, job, names=[f"{self.recipe.name}@{label}"], home=self.home,
                      cfg=for_recipes(self.cfg, [self.recipe]), command=self.command, console=self.console)

    def submit_ahead(self, variants: list[tuple[str, dict, int]]) -> None:
        """Submit every (label, overrides, repeats) now; `measure` then waits for its own job."""
        for label, overrides, repeats in variants:
            self._pending[(label, repeats)] = self._submit(label, overrides, repeats)

    def _earlier(self, label: str) -> None:
        """Say, once, that an earlier sweep of this search (the newest holding runs of the first probe,
        `label`, that it launched: toolkit.analysis.search_campaign) is neither continued nor replayed."""
        from rich.markup import escape

        from toolkit.analysis import search_campaign

        self.joined = True
        if not self.search:
            return
        rows = [r for r in self.store.runs(recipe=f"{self.recipe.name}@{label}", limit=None)
                if r.group_id != self.group_id]
        group = search_campaign.resumed(rows, self.search)
        if group is None:
            return
        done = search_campaign.finished(self.store.runs(group_id=group, limit=None), group, self.search)
        self.not_continued = {"sweep": group, "finished": done}
        self.console.print(f"[yellow]note[/]: {escape(self.not_continued_line())}")

    def not_continued_line(self) -> str:
        """What this call did not continue (`not_continued`), one line; "" when nothing."""
        if not self.not_continued:
            return ""
        done = self.not_continued["finished"]
        what = (f"finished {done[:16]}: not replayed" if done
                else "not finished (a killed call, or one measuring now): not continued")
        return (f"sweep {self.not_continued['sweep']} of this search, {what} through Slurm (each job measures anew; "
                f"values of earlier commands are not reused): this call measures again in a new sweep {self.group_id}")

    def evidence(self) -> dict:
        out = super().evidence()
        if self.search:
            out["not_continued"] = self.not_continued
        return out

    def ready(self, label: str, overrides: dict, recipe=None) -> bool:
        """The node prepares each variant in its own job: nothing is built here first."""
        return True

    def measure(self, label: str, overrides: dict, repeats: int, recipe=None) -> list[float] | None:
        """`recipe`: a variant recipe (a release) instead of overrides of this one."""
        if not self.joined:
            self._earlier(label)
        rec = self._pending.pop((label, repeats), None) or self._submit(label, overrides, repeats, recipe)
        rec = wait([rec], home=self.home, store=self.store, cfg=self.cfg, console=self.console)[0]
        done = read_json(Path(rec.folder) / DONE_NAME)
        self.builds += int(done.get("builds") or 0)
        self.runs += int(done.get("runs") or 0)
        values = done.get("values")
        if values is None:
            self.console.print(f"[yellow]skip[/] {label}: slurm job {rec.job_id} ended {rec.state} without values")
            return None
        self.record(label, None, list(values), list(done.get("run_ids") or []))  # a top-up extends its probe's entry
        left = self.reused.setdefault(label, [])  # its stored runs of another campaign, named as a local bisect names them
        left.extend(r for r in done.get("reused") or () if r not in left)
        if not left:
            del self.reused[label]
        return list(values)
