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
    the node reuses its trees and envs, the runs are new)."""

    cfg: ClusterConfig = field(default_factory=ClusterConfig)
    command: str = "bisect"
    _pending: dict = field(default_factory=dict)  # (label, repeats) -> JobRecord submitted ahead

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

    def measure(self, label: str, overrides: dict, repeats: int, recipe=None) -> list[float] | None:
        """`recipe`: a variant recipe (a release) instead of overrides of this one."""
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
