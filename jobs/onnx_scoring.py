"""Scoring with an ONNX model inside a job's query: a vectorized Arrow UDF over `onnxruntime`.

`onnx_scores(context, model, features)` is the column of scores the model the job file pins
under `model` (`pipeline.models`, `context.model`) gives the feature columns. The model's bytes
are read from the model store once by the driver and broadcast; each Python worker builds one
`onnxruntime` session from them, the first time one of its batches needs it, and keeps it for its
life (by the bytes' digest, so two versions in one session never mix). A batch of rows is one
call of the model, its features a float32 matrix of one row per input row, taken from the Arrow
batch Spark sends without pandas in between (`arrow_udf`; a pandas UDF of the same took about
a third longer, benchmarks/RESULTS.md, "In-stream model scoring").

The model takes that matrix (`[rows, features]`) as its only input and gives one score per row as
its first output (`[rows]` or `[rows, 1]`). Each worker's session runs on one thread: Spark
already runs a worker per core.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql.functions import arrow_udf

from jobs.user_code import MODELS_FIELD, JobContext, UserCodeError

if TYPE_CHECKING:
    import onnxruntime
    from pyspark.core.broadcast import Broadcast

# The sessions of this Python worker, by the digest of the model's bytes.
_SESSIONS: dict[str, onnxruntime.InferenceSession] = {}


def model_session(content: bytes) -> onnxruntime.InferenceSession:
    """An `onnxruntime` session of the model `content`, on one thread."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(content, options, providers=["CPUExecutionProvider"])


def score_matrix(session: onnxruntime.InferenceSession, features: np.ndarray) -> np.ndarray:
    """One score per row of `features` (float32, `[rows, features]`)."""
    (model_input,) = session.get_inputs()
    output = session.run(None, {model_input.name: features})[0]
    scores = np.asarray(output, dtype=np.float64)
    if scores.shape not in ((len(features),), (len(features), 1)):
        raise ValueError(
            f"the model's first output has shape {scores.shape} for {len(features)} rows: "
            "one score per row is expected"
        )
    return scores.reshape(len(features))


def _worker_session(digest: str, content: Broadcast[bytes]) -> onnxruntime.InferenceSession:
    session = _SESSIONS.get(digest)
    if session is None:
        session = _SESSIONS[digest] = model_session(content.value)
    return session


def onnx_scores(context: JobContext, model: str, features: list[Column]) -> Column:
    """The scores (double) of the pinned model `model` for the `features` columns (numeric; a
    null is NaN to the model)."""
    content = context.model(model)
    digest = hashlib.sha256(content).hexdigest()
    # Loaded once in the driver, so a model the runtime refuses is the job's error before it runs.
    try:
        model_session(content)
    except Exception as refused:  # onnxruntime raises its own classes for a graph it cannot load
        raise UserCodeError(
            f"{MODELS_FIELD}.{model}",
            f"onnxruntime cannot load version {context.models[model].version} of model "
            f"{context.models[model].name!r}: {refused}".splitlines()[0],
        ) from refused
    shared = context.spark.sparkContext.broadcast(content)

    @arrow_udf("double")  # type: ignore[call-overload, untyped-decorator]
    def scores(*columns: pa.Array) -> pa.Array:
        # float32 columns: a batch without nulls is read without a copy, a null is NaN.
        matrix = np.column_stack([column.to_numpy(zero_copy_only=False) for column in columns])
        return pa.array(score_matrix(_worker_session(digest, shared), matrix))

    return scores(*(feature.cast("float") for feature in features))  # type: ignore[no-any-return]
