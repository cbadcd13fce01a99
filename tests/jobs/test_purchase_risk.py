"""In-stream model scoring (`jobs.purchase_risk`, `jobs.onnx_scoring`): the shipped example job's
real query over generated events, its model read from the model store of a real S3 server.

The stream's rows equal the batch run's, and every score equals what a plain `onnxruntime`
session gives the same purchases, their features computed here in pandas from the job's documented
definition. A job file pinning a version the store does not hold, or one `onnxruntime` cannot
load, is the job's error, naming its field.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.analysis import analyse
from jobs.batch import batch_rows
from jobs.onnx_scoring import model_session
from jobs.purchase_risk.model import logistic_model
from ops.exceptions import ConfigError
from ops.models import push_model
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from synthetic.generator import write_batch
from tests.support.purchase_risk import JOB, install_risk_job, push_risk_model
from tests.support.spark import run_available_now


def test_the_streams_scores_equal_the_batch_run_and_a_plain_onnxruntime_session(
    spark: SparkSession, platform_with_s3: PlatformConfig, tmp_path: Path
) -> None:
    platform = platform_with_s3
    assert push_risk_model(platform, tmp_path / "models").version == 1
    install_risk_job(platform, model_version=1)
    for seed in range(3):
        write_batch(platform.landing_root / "events", 300, 0.05, seed)
    spec = find_job(JOB, platform.conf_dir)

    run_available_now(spark, platform, spec)

    streamed = spark.read.parquet(str(platform.lake_root / "purchase_risk"))
    batch = batch_rows(spark, platform, spec, platform.landing_root)
    assertDataFrameEqual(streamed.select(*batch.columns), batch)
    scored = streamed.where("dead_letter_reason IS NULL").toPandas()
    assert len(scored) > 50 and set(scored["model_version"]) == {1}
    features = np.column_stack(
        [
            np.log1p(scored["amount"].fillna(0.0)),
            scored["event_time"].dt.hour / 23.0,
            (scored["country"].fillna("") != "DE").astype(float),
        ]
    ).astype(np.float32)
    session = model_session(logistic_model())
    expected = session.run(None, {"features": features})[0].reshape(-1)
    np.testing.assert_allclose(scored["score"].to_numpy(), expected, rtol=1e-6)
    assert 0.0 < scored["score"].min() < scored["score"].max() < 1.0
    assert streamed.where("dead_letter_reason IS NOT NULL").count() == 3 * 15


def test_a_model_version_the_store_does_not_hold_or_the_runtime_cannot_load_is_the_jobs_error(
    spark: SparkSession, platform_with_s3: PlatformConfig, tmp_path: Path
) -> None:
    platform = platform_with_s3
    push_risk_model(platform, tmp_path / "models")
    install_risk_job(platform, model_version=2)
    (platform.landing_root / "events").mkdir(parents=True)
    spec = find_job(JOB, platform.conf_dir)

    problems = analyse(spark, platform, spec)

    assert list(problems) == ["pipeline.models.risk"]
    assert "model 'purchase_risk' has no version 2" in problems["pipeline.models.risk"]
    assert "(stored versions: 1)" in problems["pipeline.models.risk"]
    with pytest.raises(
        ConfigError, match=r"field 'pipeline\.models\.risk': model 'purchase_risk' has no version 2"
    ):
        batch_rows(spark, platform, spec, platform.landing_root)

    # Version 2 exists now, but it is not a model onnxruntime loads.
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx graph")
    assert push_model(platform, "purchase_risk", broken).version == 2
    problems = analyse(spark, platform, spec)
    assert list(problems) == ["pipeline.models.risk"]
    assert problems["pipeline.models.risk"].startswith(
        "onnxruntime cannot load version 2 of model 'purchase_risk'"
    )
