"""Cluster settings: the `[cluster]` table of the user config under the command line's knobs."""

from __future__ import annotations

import argparse

import pytest

from toolkit.errors import BadInput
from toolkit.executors.config import ClusterConfig, add_executor_arguments, cluster_config, for_recipes, time_minutes
from toolkit.recipe.load import load_recipe


def _args(*argv):
    p = argparse.ArgumentParser()
    add_executor_arguments(p)
    return p.parse_args(list(argv))


@pytest.mark.parametrize("text,minutes", [("90", 90), ("1:30:00", 90), ("2-00", 2880), ("1-1:0:30", 1501),
                                          ("10:30", 11)])
def test_slurm_time_formats(text, minutes):
    assert time_minutes(text) == minutes


def test_command_line_wins_over_user_config(tmp_path):
    (tmp_path / "config.toml").write_text('[cluster]\npartition = "gpu"\naccount = "perf"\ntime = "2:00:00"\n'
                                          '[cluster.slurm_args]\nconstraint = "rtx6000"\nqos = "low"\n')
    cfg = cluster_config(_args("--partition", "debug", "--slurm-arg", "qos=high", "--gpus-per-node", "8"), tmp_path)
    assert cfg.sbatch_parameters() == {"partition": "debug", "account": "perf", "gpus_per_node": 8, "time": 120,
                                       "additional_parameters": {"constraint": "rtx6000", "qos": "high"}}
    assert cfg.source == str(tmp_path / "config.toml")


def test_bad_settings_are_one_line_errors(tmp_path):
    with pytest.raises(BadInput, match="KEY=VALUE"):
        cluster_config(_args("--slurm-arg", "nokey"), tmp_path)
    with pytest.raises(BadInput, match="HH:MM:SS"):
        time_minutes("soon")
    (tmp_path / "config.toml").write_text('[cluster]\npartiton = "gpu"\n')
    with pytest.raises(BadInput, match="unknown \\[cluster\\] key"):
        cluster_config(_args(), tmp_path)


def test_gpus_per_node_follow_the_recipe_unless_asked():
    demo = load_recipe("demo/baseline")  # gpus = 0: asks for none
    assert for_recipes(ClusterConfig(), [demo]).gpus_per_node is None
    ep8 = load_recipe("ep8")  # no [server] gpus: its tp-size (8 unless PATCHBENCH_GPUS says otherwise)
    need = int(dict(ep8.server.args)["tp-size"])
    assert for_recipes(ClusterConfig(), [demo, ep8]).gpus_per_node == need
    assert for_recipes(ClusterConfig(gpus_per_node=2), [ep8]).gpus_per_node == 2


def test_a_slurm_probe_job_carries_the_design_its_runs_record(monkeypatch, tmp_path):
    """bisect on Slurm: the job that measures a probe gets the sequential design, so the node's runs
    record it (extra.sequential) as a local bisect's probes do."""
    from toolkit.analysis.bisect import step_design
    from toolkit.analysis.variants import MetricSpec
    from toolkit.executors import slurm_variants

    sent = []
    monkeypatch.setattr(slurm_variants, "submit", lambda fn, job, **kw: sent.append(job))
    design = step_design(threshold_pct=5.0)
    meter = slurm_variants.SlurmVariantMeter(load_recipe("demo/baseline"), tmp_path, None, MetricSpec("output_tok_s", 1),
                                             None, group_id="g", design=design)
    monkeypatch.setattr(slurm_variants, "direct_store", lambda store: None)
    meter._submit("prefix1", {}, 2)
    assert sent and sent[0].design == design
