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
    from toolkit.analysis.bisect_rule import step_design
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


def test_slurm_says_it_measures_the_fixed_design_and_refuses_the_sequential_options(tmp_path, home, monkeypatch,
                                                                                    capsys):
    """`run A B --executor slurm --max-repeats 16` (and `sweep --max-repeats`) measured each recipe's
    [benchmark] repeats in the job and never said the sequential options went unused; a plain `run A B`
    (sequential locally) said nothing of it either. Now the options are refused (exit 2, one line) and
    the plain call says which design the job measures."""
    from conftest import demo_project
    from toolkit.cli import main

    demo_project(tmp_path, monkeypatch)
    for argv in (["run", "demo/baseline", "demo/fast", "--max-repeats", "16"],
                 ["run", "demo/baseline", "demo/fast", "--sequential"],
                 ["sweep", "demo/sweep", "--max-repeats", "4"]):
        assert main([*argv, "--executor", "slurm"]) == 2, argv
        said = " ".join(capsys.readouterr().err.split())
        assert f"error: {argv[0]} --executor slurm measures the fixed design" in said and "runs locally only" in said
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))  # stops at "no sbatch on PATH", after the note
    assert main(["run", "demo/baseline", "demo/fast", "--executor", "slurm"]) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "note: run --executor slurm measures the fixed design (each recipe's [benchmark] repeats" in said, said
    assert "no `sbatch` on PATH" in said
