"""Cluster settings: the `[cluster]` table of the user config under the command line's knobs."""

from __future__ import annotations

import argparse

import pytest

from toolkit.errors import BadInput
from toolkit.executors.config import add_executor_arguments, cluster_config, time_minutes


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
