"""The PromQL tokenizer the metric-name check relies on, on the cases that could fool it."""

from __future__ import annotations

import pytest

from tests.monitoring.promql import metric_names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('up{job_name!=""} == 0', {"up"}),
        # Aggregations and functions are calls; their label lists are not metrics.
        ("sum by (job_name, task) (rate(a_total[5m])) / on(job_name) group_left(task) b", {"a_total", "b"}),
        ("sum(rate(a[5m])) without (instance)", {"a"}),
        # Numbers, exponents, hex and durations are not names.
        ("a > 1e9 and b < 0x1F or c offset 5m > 1.5e-3", {"a", "b", "c"}),
        ("max_over_time(a[1h:5m]) > 2 * b + 600", {"a", "b"}),
        # Strings and matchers hold regexes, values and Grafana variables.
        ('label_replace(a{x=~"foo|bar", y="$job"}, "dst", "$1", "src", "(.*)")', {"a"}),
        ('rate(a{job_name="$job"}[$__rate_interval])', {"a"}),
        # Keywords, and recorded series with colons.
        ("job_name:x:rate5m unless bool_metric", {"job_name:x:rate5m", "bool_metric"}),
        ("time() - (a > 0)", {"a"}),
        ('count(ALERTS{alertstate="firing"}) or vector(0)', {"ALERTS"}),
        ("a # a comment naming not_a_metric\n+ b", {"a", "b"}),
    ],
)
def test_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names
