"""The metric names a PromQL expression selects, found by a small tokenizer.

Prometheus 2.42 (Debian's) gives no way to see a parsed expression: promtool has no `promql`
command and the server no parse endpoint. So this strips, in order, what can hold identifiers
that are not metric names: string literals (label values, regexes, `label_replace` arguments),
label matchers `{...}`, range and subquery brackets `[...]`, and the label lists of `by`,
`without`, `on`, `ignoring`, `group_left` and `group_right`. What is left is numbers, durations,
operators, keywords, function and aggregation calls (an identifier followed by `(`) and metric
names. Grafana's `$variables` only occur inside strings and brackets, so they go too.

`tests/monitoring/test_promql.py` pins it on the awkward cases, and the real-driver test checks
every name it finds against a real scrape and a real Prometheus, so a name it invented or missed
would show up there.
"""

from __future__ import annotations

import re

_STRINGS = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_COMMENTS = re.compile(r"#[^\n]*")
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_LABEL_LISTS = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
# Durations before numbers (`offset 5m` is not 5 and a metric `m`), numbers before identifiers
# (`1e9` is not 1 and a metric `e9`).
_TOKENS = re.compile(
    r"(?P<duration>\d+(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)"
    r"|(?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?P<call>\s*\()?"
)
_KEYWORDS = frozenset(
    {
        "and", "or", "unless", "atan2", "bool", "offset", "by", "without", "on", "ignoring",
        "group_left", "group_right", "inf", "nan", "start", "end",
    }
)  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects."""
    text = _COMMENTS.sub(" ", _STRINGS.sub('""', expr))
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _LABEL_LISTS.sub(" ", text)
    names = set()
    for token in _TOKENS.finditer(text):
        name = token.group("name")
        if name is None or token.group("call") or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names
