"""Model files crafted as an attacker with write access to the models container would.

Each is the tiny test model (tests/onnx_models.py) with one hostile change, so that the
change alone decides whether it is refused.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.onnx_models import make_model


def _model(data: bytes | None = None) -> onnx.ModelProto:
    return onnx.load_from_string(data if data is not None else make_model())


def external_data(location: str) -> bytes:
    """The bias initializer reads 4 bytes from `location` (ONNX Runtime follows it even from bytes)."""
    model = _model()
    bias = next(t for t in model.graph.initializer if t.name == "b")
    bias.ClearField("raw_data")
    bias.ClearField("float_data")
    bias.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "4")):
        entry = bias.external_data.add()
        entry.key, entry.value = key, value
    return model.SerializeToString()


def custom_domain(domain: str = "com.example.evil") -> bytes:
    """A node of a custom-op domain (ONNX Runtime runs it if a custom-op library registered it)."""
    model = _model()
    model.opset_import.append(helper.make_opsetid(domain, 1))
    node = model.graph.node[-1]  # Concat → probabilities: keep the graph whole
    model.graph.node.insert(len(model.graph.node) - 1, helper.make_node("Steal", ["p1"], ["p1s"], domain=domain))
    node.input[1] = "p1s"
    return model.SerializeToString()


def _append(model: onnx.ModelProto, nodes: list[onnx.NodeProto], initializers: list[onnx.TensorProto]) -> bytes:
    """Route `z` (before the Sigmoid) through `nodes`, which must read `z` and write `z_`."""
    sigmoid = next(n for n in model.graph.node if n.op_type == "Sigmoid")
    sigmoid.input[0] = "z_"
    at = list(model.graph.node).index(sigmoid)
    for offset, node in enumerate(nodes):
        model.graph.node.insert(at + offset, node)
    model.graph.initializer.extend(initializers)
    return model.SerializeToString()


def memory_bomb(rows: int = 3 << 17, columns: int = 1 << 10) -> bytes:
    """ConstantOfShape of `rows x columns` floats (1.5 GiB by default) at warm-up, whatever the batch.

    NOTE: the shape is multiplied by a value read from the input's shape (width / width = 1), so
    no static check and no constant folding at load can see it; only running it shows it.
    """
    nodes = [
        helper.make_node("Shape", ["features"], ["shape"]),
        helper.make_node("Slice", ["shape", "s1", "s2"], ["width"]),
        helper.make_node("Div", ["width", "width"], ["unit"]),
        helper.make_node("Mul", ["big", "unit"], ["bomb_shape"]),
        helper.make_node("ConstantOfShape", ["bomb_shape"], ["bomb"]),
        helper.make_node("ReduceSum", ["bomb"], ["zero"], keepdims=0),
        helper.make_node("Add", ["z", "zero"], ["z_"]),
    ]
    initializers = [
        numpy_helper.from_array(np.array([1], dtype=np.int64), "s1"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "s2"),
        numpy_helper.from_array(np.array([rows, columns], dtype=np.int64), "big"),
    ]
    return _append(_model(), nodes, initializers)


def endless_loop() -> bytes:
    """A Loop with no trip count whose condition stays true: warm-up never ends."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Identity", ["carried_in"], ["carried_out"]),
        ],
        "forever",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("carried_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("carried_out", TensorProto.FLOAT, None),
        ],
    )
    nodes = [helper.make_node("Loop", ["", "always", "z"], ["z_"], body=body)]
    initializers = [numpy_helper.from_array(np.array(True), "always")]
    return _append(_model(), nodes, initializers)


def control_flow(op: str) -> bytes:
    """A harmless `If` (or the endless Loop): refused for being a subgraph op, not for what it does."""
    if op == "Loop":
        return endless_loop()
    branch = helper.make_graph(
        [helper.make_node("Identity", ["z"], ["out"])], "branch", [], [helper.make_tensor_value_info("out", 1, None)]
    )
    nodes = [helper.make_node("If", ["always"], ["z_"], then_branch=branch, else_branch=branch)]
    return _append(_model(), nodes, [numpy_helper.from_array(np.array(True), "always")])


def many_nodes(count: int) -> bytes:
    """`count` Identity nodes in a chain: a graph past the node cap."""
    nodes = [helper.make_node("Identity", ["z" if i == 0 else f"z{i}"], [f"z{i + 1}"]) for i in range(count - 1)]
    nodes.append(helper.make_node("Identity", [f"z{count - 1}" if count > 1 else "z"], ["z_"]))
    return _append(_model(), nodes, [])


def huge_initializer(elements: int) -> bytes:
    """An initializer that declares `elements` floats and carries none: a few bytes on the wire."""
    model = _model()
    tensor = helper.make_tensor("huge", TensorProto.FLOAT, [elements], [])
    tensor.ClearField("float_data")
    model.graph.initializer.append(tensor)
    return model.SerializeToString()


def versions(*, ir: int | None = None, opset: int | None = None) -> bytes:
    model = _model()
    if ir is not None:
        model.ir_version = ir
    if opset is not None:
        model.opset_import[0].version = opset
    return model.SerializeToString()


def thresholds(review: float, decline: float) -> bytes:
    """The file declares its own cut-offs: these break 0 <= review <= decline <= 1."""
    model = _model()
    entry = next(p for p in model.metadata_props if p.key == "serving.thresholds")
    entry.value = json.dumps({"review": review, "decline": decline})
    return model.SerializeToString()


def undeclared_domain(domain: str = "com.example.evil") -> bytes:
    """A custom-domain node whose domain the file does not import (the opset list looks clean)."""
    model = onnx.load_from_string(custom_domain(domain))
    del model.opset_import[-1]
    return model.SerializeToString()


def local_function() -> bytes:
    """A model-local function (its body is a graph of its own, outside the main graph's nodes)."""
    model = _model()
    body = [helper.make_node("Identity", ["x"], ["y"])]
    model.functions.append(helper.make_function("local", "Pass", ["x"], ["y"], body, [helper.make_opsetid("", 17)]))
    return model.SerializeToString()


def no_outputs() -> bytes:
    model = _model()
    del model.graph.output[:]
    return model.SerializeToString()
