"""Spark SQL boolean expressions written in job files (route filters, pattern rules), checked early.

A filter in a job file is only text until Spark plans it. `invalid_boolean_expressions` asks
Spark's analyzer about each one over the frame it will run on, so a typo is refused, with the
job file's field named (`jobs.catalog`), before any query starts rather than when the first
micro-batch runs. Only the analyzer runs: nothing is read.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

_CHECKED = "_checked"


def invalid_boolean_expressions(frame: DataFrame, expressions: Mapping[str, str]) -> dict[str, str]:
    """The expressions (name -> Spark SQL) Spark cannot parse or resolve over `frame`, or that are
    not boolean, mapped to why: the first line of the analyzer's error, or the type they have."""
    problems: dict[str, str] = {}
    for name, expression in expressions.items():
        try:
            # F.expr parses at once, so a syntax error raises here, as a ParseException.
            data_type = frame.select(F.expr(expression).alias(_CHECKED)).schema[_CHECKED].dataType
        except AnalysisException as exc:
            problems[name] = str(exc).strip().splitlines()[0]
            continue
        if not isinstance(data_type, T.BooleanType):
            problems[name] = f"is of type {data_type.simpleString()}, not boolean"
    return problems
