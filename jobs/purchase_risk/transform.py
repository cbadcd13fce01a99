"""Purchase risk: every purchase scored by an ONNX model, in the stream (in-stream model scoring).

A python job that ships with the platform as an example of the team jobs' contract
(`jobs.user_code`; its job file `conf/examples/purchase_risk.yaml`): the model is the version of
`purchase_risk` in the model store that the job file pins (`pipeline.models.risk`, `warden model
push`), scored by `jobs.onnx_scoring` in an Arrow UDF. A new version is deployed by `warden
upgrade` of the job file with the new version, and the dry run refuses it when its scores of the
savepoint's newest input move too far from the running version's (`operations.upgrade
.output_check`). Each row keeps the model version that scored it.

Features (the model's input, in this order; `jobs.purchase_risk.model.FEATURES`): the amount as
`log1p` (a missing amount is 0), the hour of the day of the event time divided by 23, and 1.0 for
an event from outside the job's `home_country` parameter (default "DE"), 0.0 otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.onnx_scoring import onnx_scores
from jobs.user_code import JobContext
from ops.spec.pipelines import EVENT_DATE, EVENT_HOUR

MODEL = "risk"
HOME_COUNTRY_PARAMETER = "home_country"
DEFAULT_HOME_COUNTRY = "DE"


def features(events: DataFrame, home_country: str) -> list[Column]:
    """The model's input columns for `events` (see the module's docstring)."""
    return [
        F.log1p(F.coalesce(events["amount"], F.lit(0.0))),
        F.hour(events["event_time"]) / F.lit(23.0),
        F.when(F.coalesce(events["country"], F.lit("")) == home_country, 0.0).otherwise(1.0),
    ]


def build(inputs: Mapping[str, DataFrame], context: JobContext) -> DataFrame:
    """The purchases of `events`, each with its model's `score` and `model_version`."""
    home_country = context.parameters.get(HOME_COUNTRY_PARAMETER, DEFAULT_HOME_COUNTRY)
    if not isinstance(home_country, str):
        raise ValueError(f"parameter {HOME_COUNTRY_PARAMETER} must be a country code, got {home_country!r}")
    purchases = inputs["events"].where(F.col("event_type") == "purchase")
    return purchases.select(
        "event_id",
        "user_id",
        "event_time",
        "amount",
        "country",
        onnx_scores(context, MODEL, features(purchases, home_country)).alias("score"),
        F.lit(context.models[MODEL].version).alias("model_version"),
        EVENT_DATE,
        EVENT_HOUR,
    )
