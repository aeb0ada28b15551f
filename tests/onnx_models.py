"""Tiny real ONNX models for tests, built with onnx.helper (no training)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from shared.domain.spec import FeatureDef, ModelSpec, Thresholds

DEFAULT_FEATURES = (
    FeatureDef("log_amount", 0.0),
    FeatureDef("channel=web", 0.0),
    FeatureDef("user_avg_amount_30d", 60.0),
    FeatureDef("user_txn_count_24h", 1.0),
)


def make_model(
    *,
    bias: float = 0.0,
    features: tuple[FeatureDef, ...] = DEFAULT_FEATURES,
    thresholds: tuple[float, float] = (0.5, 0.85),
    metadata: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
) -> bytes:
    """sigmoid(x · w + bias) as a [batch, 2] probability output, with serving metadata."""
    width = len(features)
    weights = np.linspace(0.1, 0.5, width, dtype=np.float32).reshape(width, 1)
    nodes = [
        helper.make_node("MatMul", ["features", "w"], ["z0"]),
        helper.make_node("Add", ["z0", "b"], ["z"]),
        helper.make_node("Sigmoid", ["z"], ["p1"]),
        helper.make_node("Sub", ["one", "p1"], ["p0"]),
        helper.make_node("Concat", ["p0", "p1"], ["probabilities"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 2])],
        initializer=[
            numpy_helper.from_array(weights, "w"),
            numpy_helper.from_array(np.array([bias], dtype=np.float32), "b"),
            numpy_helper.from_array(np.array([1.0], dtype=np.float32), "one"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    spec = ModelSpec(features, "features", "probabilities", 1, Thresholds(*thresholds), "tiny test model")
    props = {**(spec.to_metadata() if metadata is None else metadata), **(extra or {})}
    helper.set_model_props(model, props)
    onnx.checker.check_model(model)
    return model.SerializeToString()
