"""Model files crafted as an attacker with write access to the models container would.

Each is the tiny test model (tests/onnx_models.py) with one hostile change, so that the
change alone decides whether it is refused.
"""

from __future__ import annotations

import functools
import json
import time

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


def _amount_sized(scale: int) -> list[onnx.NodeProto]:
    """Nodes that read `n` = int(features[0, 0] * scale), shape [1]: a size an event's amount chooses."""
    return [
        helper.make_node("Slice", ["features", "origin", "first"], ["cell"]),
        helper.make_node("Reshape", ["cell", "flat"], ["cell1"]),
        helper.make_node("Mul", ["cell1", "scale"], ["scaled"]),
        helper.make_node("Cast", ["scaled"], ["n"], to=TensorProto.INT64),
    ]


def _amount_initializers(scale: int) -> list[onnx.TensorProto]:
    return [
        numpy_helper.from_array(np.array([0, 0], dtype=np.int64), "origin"),
        numpy_helper.from_array(np.array([1, 1], dtype=np.int64), "first"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "flat"),
        numpy_helper.from_array(np.array([float(scale)], dtype=np.float32), "scale"),
        numpy_helper.from_array(np.array([1024], dtype=np.int64), "wide"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "unit"),
        numpy_helper.from_array(np.ones((1, 1), dtype=np.float32), "ones"),
        numpy_helper.from_array(np.ones((1, 1024), dtype=np.float32), "row"),
    ]


def input_sized(op: str, scale: int = 1 << 16) -> bytes:
    """An allocation an event sizes: `op` makes n x 1024 floats, n = features[0, 0] * `scale`.

    The defaults (log_amount 0) make n = 0: warm-up, the golden rows and the old sandbox see an
    empty tensor; log_amount 12 (an amount of ~160k) asks for 3 GiB. `op`: ConstantOfShape,
    Expand, Tile, Range or MatMul (an n x n product: seconds in one node).
    """
    nodes = _amount_sized(scale)
    if op == "ConstantOfShape":
        nodes += [
            helper.make_node("Concat", ["n", "wide"], ["shape"], axis=0),
            helper.make_node(op, ["shape"], ["big"]),
        ]
    elif op == "Expand":
        nodes += [
            helper.make_node("Concat", ["n", "wide"], ["shape"], axis=0),
            helper.make_node(op, ["ones", "shape"], ["big"]),
        ]
    elif op == "Tile":
        nodes += [
            helper.make_node("Concat", ["n", "unit"], ["times"], axis=0),
            helper.make_node(op, ["row", "times"], ["big"]),
        ]
    elif op == "Range":
        nodes += [
            helper.make_node("Mul", ["n", "wide"], ["count1"]),
            helper.make_node("Squeeze", ["count1"], ["count"]),
            helper.make_node("Cast", ["count"], ["limit"], to=TensorProto.FLOAT),
            helper.make_node("Range", ["zero_f", "limit", "one_f"], ["big"]),
        ]
    elif op == "MatMul":
        nodes += [
            helper.make_node("Concat", ["n", "n"], ["square"], axis=0),
            helper.make_node("Expand", ["ones", "square"], ["a"]),
            helper.make_node("MatMul", ["a", "a"], ["big"]),
        ]
    else:
        raise ValueError(op)
    nodes += [
        helper.make_node("ReduceSum", ["big"], ["total"], keepdims=0),
        helper.make_node("Mul", ["total", "zero_f"], ["nothing"]),
        helper.make_node("Add", ["z", "nothing"], ["z_"]),
    ]
    initializers = [
        *_amount_initializers(scale),
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero_f"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one_f"),
    ]
    return _append(_model(), nodes, initializers)


def slow_chain(links: int = 400, side: int = 384, scale: int = 64) -> bytes:
    """`links` MatMuls of an (n x side) tensor by a side x side matrix, n = features[0, 0] * `scale`:
    each node takes a few ms on a large amount, the chain seconds; nothing on the defaults."""
    nodes = [
        *_amount_sized(scale),
        helper.make_node("Concat", ["n", "side"], ["shape"], axis=0),
        helper.make_node("Expand", ["ones", "shape"], ["x0"]),
    ]
    for i in range(links):
        nodes.append(helper.make_node("MatMul", [f"x{i}", "w_side"], [f"m{i}"]))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"x{i + 1}"]))
    nodes += [
        helper.make_node("ReduceSum", [f"x{links}"], ["total"], keepdims=0),
        helper.make_node("Mul", ["total", "zero_f"], ["nothing"]),
        helper.make_node("Add", ["z", "nothing"], ["z_"]),
    ]
    initializers = [
        *_amount_initializers(scale),
        numpy_helper.from_array(np.array([side], dtype=np.int64), "side"),
        numpy_helper.from_array(np.full((side, side), 1.0 / side, dtype=np.float32), "w_side"),
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero_f"),
    ]
    return _append(_model(), nodes, initializers)


@functools.cache
def sized_links(cpu_s: float, log_amount: float = 4.0) -> int:
    """How many links make one run of `slow_chain` on a row of `log_amount` take `cpu_s` of CPU on this
    machine (one thread): CPU speeds differ (52 links were ~40 ms at 4.0 on the 2026-11 machines, ~20 ms
    on a 2026-12 Xeon core), and a test of starvation needs runs long enough to be caught mid-run."""
    from shared.models.onnx import OnnxModel
    from shared.models.vetting import VettingPolicy
    from shared.settings import OrtOptions

    vetting = VettingPolicy(static_shapes=False, extra_ops=frozenset({"ConstantOfShape", "Expand", "Tile", "Range"}))
    model = OnnxModel.load(slow_chain(links=52), OrtOptions(run_deadline_ms=5000, use_gpu=False), vetting)
    row = np.array([[log_amount, 0.0, 60.0, 1.0]], dtype=np.float32)
    took = []
    for _ in range(3):
        started = time.thread_time()
        model.predict(row)
        took.append(time.thread_time() - started)
    return max(8, min(1000, round(52 * cpu_s / min(took))))


def sequence_map() -> bytes:
    """A SequenceMap (a subgraph op ONNX Runtime expands into a loop) over a one-tensor sequence."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["item"], ["mapped"])],
        "each",
        [helper.make_tensor_value_info("item", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("mapped", TensorProto.FLOAT, None)],
    )
    nodes = [
        helper.make_node("SequenceConstruct", ["z"], ["seq"]),
        helper.make_node("SequenceMap", ["seq"], ["seq_"], body=body),
        helper.make_node("SequenceAt", ["seq_", "at0"], ["z_"]),
    ]
    return _append(_model(), nodes, [numpy_helper.from_array(np.array(0, dtype=np.int64), "at0")])


def value_shaped_reshape() -> bytes:
    """Only allowed ops, but Reshape's shape is read from the input's values: an event picks a shape."""
    nodes = [
        *_amount_sized(1),
        helper.make_node("Concat", ["n", "minus_one"], ["shape"], axis=0),
        helper.make_node("Reshape", ["z", "shape"], ["z_"]),
    ]
    initializers = [
        *_amount_initializers(1),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus_one"),
    ]
    return _append(_model(), nodes, initializers)


def doubling(steps: int = 28) -> bytes:
    """Only allowed ops and static shapes: `steps` Concat(t, t) make each row 2^steps floats (1 GiB at 28).

    Large on every input, the defaults included: what the sandbox's trial (and the memory cap) catches.
    """
    nodes = [
        helper.make_node("Concat", [f"d{i}" if i else "z", f"d{i}" if i else "z"], [f"d{i + 1}"], axis=1)
        for i in range(steps)
    ]
    nodes += [
        helper.make_node("ReduceSum", [f"d{steps}", "last"], ["total"], keepdims=1),
        helper.make_node("Mul", ["total", "zero_f"], ["nothing"]),
        helper.make_node("Add", ["z", "nothing"], ["z_"]),
    ]
    initializers = [
        numpy_helper.from_array(np.array([1], dtype=np.int64), "last"),
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero_f"),
    ]
    return _append(_model(), nodes, initializers)


def constant_score(logit: float) -> bytes:
    """Scores sigmoid(`logit`) whatever the event: its decline threshold (0.85) is never reached when low."""
    nodes = [
        helper.make_node("Mul", ["z", "zero_f"], ["flat"]),
        helper.make_node("Add", ["flat", "logit"], ["z_"]),
    ]
    initializers = [
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero_f"),
        numpy_helper.from_array(np.array(logit, dtype=np.float32), "logit"),
    ]
    return _append(_model(), nodes, initializers)


def banded_chain(low: float = 12.0, high: float = 13.0, links: int = 400, side: int = 384) -> bytes:
    """The slow chain, sized only while features[0, 0] lies strictly between `low` and `high`
    (n = 1024 * relu(x - low) * relu(high - x)): zero on the defaults and on every adversarial row of
    the trial (0, ±1, ±1e6, ±3e38; NaN and inf fail the run, which gives no score); seconds of work
    on one event whose log-amount falls in the band (an amount of ~270,000)."""
    nodes = [
        helper.make_node("Slice", ["features", "origin", "first"], ["cell"]),
        helper.make_node("Reshape", ["cell", "flat"], ["x"]),
        helper.make_node("Sub", ["x", "low"], ["above"]),
        helper.make_node("Sub", ["high", "x"], ["below"]),
        helper.make_node("Relu", ["above"], ["above_"]),
        helper.make_node("Relu", ["below"], ["below_"]),
        helper.make_node("Mul", ["above_", "below_"], ["bump"]),
        helper.make_node("Mul", ["bump", "scale"], ["scaled"]),
        helper.make_node("Cast", ["scaled"], ["n"], to=TensorProto.INT64),
        helper.make_node("Concat", ["n", "side"], ["shape"], axis=0),
        helper.make_node("Expand", ["ones", "shape"], ["x0"]),
    ]
    for i in range(links):
        nodes.append(helper.make_node("MatMul", [f"x{i}", "w_side"], [f"m{i}"]))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"x{i + 1}"]))
    nodes += [
        helper.make_node("ReduceSum", [f"x{links}"], ["total"], keepdims=0),
        helper.make_node("Mul", ["total", "zero_f"], ["nothing"]),
        helper.make_node("Add", ["z", "nothing"], ["z_"]),
    ]
    initializers = [
        *(i for i in _amount_initializers(1) if i.name != "scale"),
        numpy_helper.from_array(np.array([low], dtype=np.float32), "low"),
        numpy_helper.from_array(np.array([high], dtype=np.float32), "high"),
        numpy_helper.from_array(np.array([1024.0], dtype=np.float32), "scale"),
        numpy_helper.from_array(np.array([side], dtype=np.int64), "side"),
        numpy_helper.from_array(np.full((side, side), 1.0 / side, dtype=np.float32), "w_side"),
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero_f"),
    ]
    return _append(_model(), nodes, initializers)
