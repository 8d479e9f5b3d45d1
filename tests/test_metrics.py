"""The metric registry: one table of names, units, directions and sglang aliases, read by every verb."""

from __future__ import annotations

import pytest

from toolkit.results import metrics
from toolkit.run.bench.one_batch import parse_one_batch_rows
from toolkit.run.bench.sglang_jsonl import parse_bench_serving_rows
from toolkit.errors import BadInput


def test_registry_directions_units_and_headline():
    assert metrics.get("output_tok_s").higher_is_better and metrics.unit_of("output_tok_s") == "tok/s"
    assert metrics.higher_is_better("itl_ms_p99") is False and metrics.unit_of("itl_ms_p99") == "ms"
    assert metrics.higher_is_better("failed") is False
    assert metrics.higher_is_better("mystery") is None
    de = metrics.get("distinct_experts")
    assert de.direction == "lower" and "OEA" in de.description
    assert metrics.default_names()[:2] == ["output_tok_s", "decode_tok_s"]
    assert metrics.throughput_headline() == ["output_tok_s", "decode_tok_s"]


def test_metric_spec_syntax_and_unknown_names():
    assert metrics.parse_spec("itl_ms_median@4") == metrics.MetricSpec("itl_ms_median", 4)
    assert metrics.parse_spec("output_tok_s").point is None
    with pytest.raises(BadInput) as e:
        metrics.parse_spec("no_such_metric")
    assert "output_tok_s" in str(e.value) and "distinct_experts" in str(e.value)
    with pytest.raises(BadInput):
        metrics.parse_spec("ttft_median@x")


def test_importers_read_sglang_names_through_the_aliases():
    s = {x.metric: x for x in parse_bench_serving_rows([{"output_throughput": 10.0, "median_itl_ms": 5.0,
                                                         "max_concurrency": 4}])}
    assert s["output_tok_s"].value == 10.0 and s["itl_ms_median"].unit == "ms" and s["itl_ms_median"].point == 4
    b = {x.metric: x for x in parse_one_batch_rows([{"batch_size": 2, "median_decode_latency": 0.01,
                                                     "median_decode_throughput": 200.0, "distinct_experts": 9}])}
    assert b["decode_step_ms_median"].value == pytest.approx(10.0) and b["decode_tok_s"].unit == "tok/s"
    assert b["distinct_experts"].value == 9 and b["distinct_experts"].point_kind == "batch"
