"""In-stream model scoring against a plain onnxruntime loop over the same rows, on 2 cores.

    python -m benchmarks.scoring [--rows 2000000] [--rounds 3] [--hidden 0 64]

Writes `--rows` rows of the purchase risk model's three features (float32, plus an id) to one
Parquet file, then per model times the sides below over that file, alternating, a warm-up of each
first:

- **spark**: `jobs.onnx_scoring.onnx_scores`, the Arrow UDF the scoring jobs use, in a local[2]
  SparkSession (the platform's session settings, `ops.driver.session.build_session`, two Python
  workers), over the file read by Spark, evaluated to the end by the `noop` sink.
- **onnxruntime**: one Python process reads the file with pyarrow and calls one `onnxruntime`
  session (its default thread pool, every core) on chunks of 10,000 rows, the UDF's Arrow batch
  size: the strongest plain loop over the same rows.

Models: `--hidden 0` is the purchase risk job's logistic regression (`jobs.purchase_risk.model`),
almost no arithmetic per row, so the two sides' fixed costs per batch show; `--hidden H` an
MLP of two hidden layers of H units (ReLU; fixed random weights), a model with work in it.
Spark's share of a row (the Parquet read, the Arrow round trip to a Python worker) is fixed, so
the ratio rises with the model's work per row. A third side measures that share alone:

- **spark, no model**: the same query and the same columns to the Python workers, with an Arrow
  UDF that scores nothing (`unscored`: the first feature as the score). Its rows/s against the
  plain loop's is the most the spark side could reach for that model, however fast its scoring.

Prints rows/s per side, the ratio spark / onnxruntime (target >= 0.7x) and that ceiling.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from onnx import TensorProto, helper, numpy_helper
from pyspark.sql import SparkSession
from pyspark.sql.functions import arrow_udf
from pyspark.sql.types import DoubleType

from jobs.onnx_scoring import model_session, onnx_scores, score_matrix
from jobs.purchase_risk.model import FEATURES, OPSET, logistic_model
from jobs.user_code import JobContext
from ops.driver.session import build_session
from ops.spec.job import find_job
from ops.spec.pipelines import ModelRef
from ops.spec.platform import load_platform

HERE = Path(__file__).resolve().parent
WORKDIR = HERE / "out" / "scoring"
CHUNK_ROWS = 10_000


def mlp_model(hidden: int, seed: int = 7) -> bytes:
    """Two ReLU layers of `hidden` units over the features, then a sigmoid score."""
    rng = np.random.default_rng(seed)
    sizes = [len(FEATURES), hidden, hidden, 1]
    nodes, initializers, current = [], [], "features"
    for layer, (rows, cols) in enumerate(zip(sizes, sizes[1:], strict=False)):
        weights, bias = f"w{layer}", f"b{layer}"
        initializers += [
            numpy_helper.from_array(
                (rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(np.float32), weights
            ),
            numpy_helper.from_array(np.zeros(cols, dtype=np.float32), bias),
        ]
        nodes += [
            helper.make_node("MatMul", [current, weights], [f"m{layer}"]),
            helper.make_node("Add", [f"m{layer}", bias], [f"a{layer}"]),
        ]
        last = layer == len(sizes) - 2
        nodes.append(
            helper.make_node("Sigmoid" if last else "Relu", [f"a{layer}"], ["score" if last else f"h{layer}"])
        )
        current = f"h{layer}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [None, len(FEATURES)])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, [None, 1])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model.SerializeToString()


def write_features(path: Path, rows: int) -> None:
    rng = np.random.default_rng(1)
    table = pa.table(
        {
            "event_id": pa.array(np.arange(rows)),
            FEATURES[0]: np.log1p(rng.uniform(0, 500, rows)).astype(np.float32),
            FEATURES[1]: (rng.integers(0, 24, rows) / 23).astype(np.float32),
            FEATURES[2]: (rng.random(rows) < 0.3).astype(np.float32),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=CHUNK_ROWS * 10)


def onnxruntime_side(model: Path, path: Path) -> float:
    """Wall seconds of the plain loop in a process of its own (its imports done first): the
    session built, the file read, every chunk scored. Apart from the Spark driver's process, so
    neither side's threads share an interpreter with the other's."""
    answer = subprocess.run(
        [sys.executable, "-m", "benchmarks.scoring", "plain", str(model), str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(answer.stdout.split()[-1])


def plain_loop(model: Path, path: Path) -> float:
    """The plain loop itself (`plain`, in the child): its wall seconds."""
    import onnxruntime

    started = time.monotonic()
    session = onnxruntime.InferenceSession(model.read_bytes(), providers=["CPUExecutionProvider"])
    table = pq.read_table(path, columns=list(FEATURES))
    matrix = np.column_stack([table.column(name).to_numpy() for name in FEATURES])
    total = 0.0
    for start in range(0, len(matrix), CHUNK_ROWS):
        total += float(score_matrix(session, matrix[start : start + CHUNK_ROWS]).sum())
    assert np.isfinite(total)
    return time.monotonic() - started


# A type, not its name: a name is parsed by a running session, and this is defined at import.
@arrow_udf(DoubleType())  # type: ignore[call-overload, untyped-decorator]
def unscored(first: pa.Array, *_others: pa.Array) -> pa.Array:
    """The floor's UDF: the features in, as `onnx_scores` takes them, and no model run."""
    return pc.cast(first, pa.float64())


def spark_side(spark: SparkSession, content: bytes | None, path: Path) -> float:
    """Wall seconds: the file read by Spark, scored by the jobs' UDF (`content` None: by
    `unscored`), evaluated to the end."""
    started = time.monotonic()
    frame = spark.read.parquet(str(path))
    features = [frame[name] for name in FEATURES]
    if content is None:
        scores = unscored(*(feature.cast("float") for feature in features))
    else:
        pinned = {"model": ModelRef(name="benchmark", version=1)}
        context = JobContext("benchmark", {}, spark, pinned, lambda _ref: content)
        scores = onnx_scores(context, "model", features)
    frame.select("event_id", scores.alias("score")).write.format("noop").mode("overwrite").save()
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scoring", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    plain = sub.add_parser("plain", help="internal: the plain onnxruntime loop's process")
    plain.add_argument("model", type=Path)
    plain.add_argument("features", type=Path)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--hidden", type=int, nargs="+", default=[0, 64, 256], help="0: the job's logistic model"
    )
    args = parser.parse_args(argv)
    if args.command == "plain":
        print(f"{plain_loop(args.model, args.features):.4f}")
        return 0
    path = WORKDIR / "features.parquet"
    print(f"writing {args.rows:,} rows of features to {path} ...", flush=True)
    write_features(path, args.rows)
    # The platform's session settings for a job of this shape: the shipped warehouse writer's.
    spark = build_session(load_platform(), find_job("warehouse_writer"))
    lines = [
        "| model | rows | spark rows/s (median) | onnxruntime rows/s (median) | ratio "
        "| spark, no model, rows/s (median) | its ratio: the ceiling |",
        "|---|---|---|---|---|---|---|",
    ]
    for hidden in args.hidden:
        content = logistic_model() if hidden == 0 else mlp_model(hidden)
        model_session(content)
        model = WORKDIR / f"model-{hidden}.onnx"
        model.write_bytes(content)
        name = "logistic regression (the job's)" if hidden == 0 else f"MLP {hidden}x{hidden}"
        spark_side(spark, content, path)
        onnxruntime_side(model, path)
        spark_side(spark, None, path)
        spark_seconds, plain_seconds, floor_seconds = [], [], []
        for round_no in range(args.rounds):
            spark_seconds.append(spark_side(spark, content, path))
            plain_seconds.append(onnxruntime_side(model, path))
            floor_seconds.append(spark_side(spark, None, path))
            print(
                f"  {name}, round {round_no + 1}: spark {spark_seconds[-1]:.2f} s, "
                f"onnxruntime {plain_seconds[-1]:.2f} s, spark with no model {floor_seconds[-1]:.2f} s",
                flush=True,
            )
        spark_rate = args.rows / statistics.median(spark_seconds)
        plain_rate = args.rows / statistics.median(plain_seconds)
        floor_rate = args.rows / statistics.median(floor_seconds)
        lines.append(
            f"| {name} | {args.rows:,} | {spark_rate:,.0f} | {plain_rate:,.0f} "
            f"| {spark_rate / plain_rate:.2f}x | {floor_rate:,.0f} | {floor_rate / plain_rate:.2f}x |"
        )
    spark.stop()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
