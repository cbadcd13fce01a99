"""`python -m jobs.purchase_risk.model OUT.onnx [--weights W W W] [--bias B]`: a purchase risk
model as an ONNX file, for `warden model push purchase_risk OUT.onnx`.

The model is a logistic regression over the job's three features (`FEATURES`): score =
sigmoid(features . weights + bias), built node by node with `onnx`'s own helper, so nothing is
trained or downloaded. The defaults score a large night-time purchase from abroad high.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FEATURES = ("log_amount", "hour_of_day", "abroad")
DEFAULT_WEIGHTS = (0.9, -1.5, 1.2)
DEFAULT_BIAS = -4.0
# The opset every ONNX runtime of the last years runs; the graph uses only MatMul, Add, Sigmoid.
OPSET = 17


def logistic_model(weights: Sequence[float] = DEFAULT_WEIGHTS, bias: float = DEFAULT_BIAS) -> bytes:
    """The serialized model: input `features` float32 `[rows, 3]`, output `score` float32 `[rows, 1]`."""
    if len(weights) != len(FEATURES):
        raise ValueError(f"{len(weights)} weights for {len(FEATURES)} features {FEATURES}")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["features", "weights"], ["linear"]),
            helper.make_node("Add", ["linear", "bias"], ["logit"]),
            helper.make_node("Sigmoid", ["logit"], ["score"]),
        ],
        "purchase_risk",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [None, len(FEATURES)])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, [None, 1])],
        initializer=[
            numpy_helper.from_array(np.asarray(weights, dtype=np.float32).reshape(-1, 1), "weights"),
            numpy_helper.from_array(np.asarray([bias], dtype=np.float32), "bias"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    serialized: bytes = model.SerializeToString()
    return serialized


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.purchase_risk.model", description=__doc__.splitlines()[0]
    )
    parser.add_argument("output", type=Path, help="the .onnx file to write")
    parser.add_argument("--weights", type=float, nargs=len(FEATURES), default=DEFAULT_WEIGHTS, metavar="W")
    parser.add_argument("--bias", type=float, default=DEFAULT_BIAS)
    args = parser.parse_args(argv)
    args.output.write_bytes(logistic_model(args.weights, args.bias))
    print(f"{args.output}: logistic regression over {', '.join(FEATURES)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
