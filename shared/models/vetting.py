"""Static checks of a model file, before ONNX Runtime sees a byte of it.

A model file is code from whoever can write to the models container: ONNX Runtime follows
an initializer's external-data location (absolute or `../`) even when the model is loaded
from bytes, resolves ops from any domain a custom-op library registered, and runs
whatever control flow the graph holds (docs/platform.md, "ONNX Runtime and model files").
So the ModelProto is parsed here with the ONNX schema alone (`onnx_ml_pb2`, generated from
`proto/onnx_ml.proto`: no `onnx` package at run time) and refused, with the reason, when:

    external data      any tensor whose data lives outside the file (any location at all)
    op domains         a node or opset outside ai.onnx / ai.onnx.ml (custom ops, contrib ops)
    opsets, IR         outside the range this ONNX Runtime serves (SUPPORTED_*)
    graph attributes   any op carrying a graph (Loop, Scan, If, SequenceMap...) unless
                       `VettingPolicy.allowed_control_flow` names it (Loop, Scan or If only)
    operators          an op outside ALLOWED_OPS: what the project's trainers emit (skl2onnx trees
                       and linear models) and the common tabular and MLP ops (docs/models.md lists
                       them). Nothing that makes a tensor larger than its inputs from a value
                       (ConstantOfShape, Expand, Tile, Range, Pad, Resize, OneHot...) is on it.
    static shapes      a shape input (Reshape's shape, Slice's starts and ends, an axes input...)
                       computed from the *values* of the graph's input: only constants and the
                       input's shape may size a tensor, so every shape but the batch axis is
                       known from the file, and no event's values can choose one
    functions          model-local functions and training info (not needed to score)
    size               nodes or declared initializer elements past the policy's caps
    metadata           the serving metadata (`shared.domain.spec`): thresholds in [0, 1],
                       review <= decline, features that fit the graph's input

What a static check cannot see (a file slow or large on every input) is the sandbox's job
(`shared.models.sandbox`), and whatever gets through both is bounded at every run
(`shared.models.bounds`).

NOTE: the static-shape rule is a walk of the graph's data flow, not ONNX's shape inference: the
`onnx` package is not a run-time dependency (this module reads the file with the schema alone).
With the allow-list it is the same guarantee: no allowed op grows a tensor from a value, and no
shape input of an allowed op may come from the input's values.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from math import prod
from typing import Any

from google.protobuf.message import DecodeError

from shared.domain.spec import ModelSpec
from shared.errors import ModelInvalid
from shared.models import onnx_ml_pb2 as pb

__all__ = [
    "ALLOWED_OPS",
    "CONTROL_FLOW",
    "DEFAULT_POLICY",
    "SHAPE_INPUTS",
    "SUPPORTED_IR",
    "SUPPORTED_OPSETS",
    "VettingPolicy",
    "vet",
]

# what onnxruntime 1.23 implements (its docs' compatibility table: IR 11, ai.onnx opset 23,
# ai.onnx.ml opset 5); the floors are the oldest files any exporter we use still writes.
SUPPORTED_IR = range(3, 12)
SUPPORTED_OPSETS = {"": range(7, 24), "ai.onnx": range(7, 24), "ai.onnx.ml": range(1, 6)}
CONTROL_FLOW = frozenset({"Loop", "Scan", "If"})
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL
_GRAPH, _GRAPHS = 5, 10  # AttributeProto.AttributeType.GRAPH, GRAPHS

# what a served scoring model needs: skl2onnx's trees and linear models (ai.onnx.ml), and the
# common tabular and MLP ops. An allow-list, not a deny-list: an op ONNX adds later is refused.
ALLOWED_OPS = {
    "": frozenset(
        [
            "Abs",
            "Add",
            "And",
            "ArgMax",
            "ArgMin",
            "BatchNormalization",
            "Cast",
            "CastLike",
            "Ceil",
            "Clip",
            "Concat",
            "Constant",
            "Div",
            "Dropout",
            "Elu",
            "Equal",
            "Erf",
            "Exp",
            "Flatten",
            "Floor",
            "Gather",
            "GatherElements",
            "Gemm",
            "Greater",
            "GreaterOrEqual",
            "HardSigmoid",
            "HardSwish",
            "Identity",
            "IsInf",
            "IsNaN",
            "LayerNormalization",
            "LeakyRelu",
            "Less",
            "LessOrEqual",
            "Log",
            "LogSoftmax",
            "MatMul",
            "Max",
            "Mean",
            "Min",
            "Mod",
            "Mul",
            "Neg",
            "Not",
            "Or",
            "Pow",
            "PRelu",
            "Reciprocal",
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSumExp",
            "ReduceMax",
            "ReduceMean",
            "ReduceMin",
            "ReduceProd",
            "ReduceSum",
            "ReduceSumSquare",
            "Relu",
            "Reshape",
            "Round",
            "Selu",
            "Shape",
            "Sigmoid",
            "Sign",
            "Size",
            "Slice",
            "Softmax",
            "Softplus",
            "Softsign",
            "Split",
            "Sqrt",
            "Squeeze",
            "Sub",
            "Sum",
            "Tanh",
            "Transpose",
            "Unsqueeze",
            "Where",
            "Xor",
        ]
    ),
    "ai.onnx.ml": frozenset(
        [
            "ArrayFeatureExtractor",
            "Binarizer",
            "FeatureVectorizer",
            "Imputer",
            "LabelEncoder",
            "LinearClassifier",
            "LinearRegressor",
            "Normalizer",
            "OneHotEncoder",
            "SVMClassifier",
            "SVMRegressor",
            "Scaler",
            "TreeEnsemble",
            "TreeEnsembleClassifier",
            "TreeEnsembleRegressor",
        ]
    ),
}
# the inputs of allowed ops that give a shape (or axes, or bounds) by value: each must be computed
# from constants and shapes alone, never from the graph input's values
SHAPE_INPUTS = {
    "Reshape": (1,),
    "Slice": (1, 2, 3, 4),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "Split": (1,),
    "ReduceL1": (1,),
    "ReduceL2": (1,),
    "ReduceLogSumExp": (1,),
    "ReduceMax": (1,),
    "ReduceMean": (1,),
    "ReduceMin": (1,),
    "ReduceProd": (1,),
    "ReduceSum": (1,),
    "ReduceSumSquare": (1,),
    # not on the allow-list; checked too for a deployment whose `extra_ops` names them
    "ConstantOfShape": (0,),
    "Expand": (1,),
    "Tile": (1,),
    "Range": (0, 1, 2),
    "Pad": (1, 2),
    "Resize": (1, 2, 3),
    "OneHot": (1,),
    "TopK": (1,),
}
_SHAPE_ONLY = frozenset({"Shape", "Size"})  # outputs that tell a tensor's shape, never its values


@dataclass(frozen=True)
class VettingPolicy:
    """Caps a model file must stay within (whole graph, subgraphs included)."""

    max_nodes: int = 10_000
    max_initializer_elements: int = 64 * 1024 * 1024  # declared elements, all tensors together
    allowed_control_flow: frozenset[str] = frozenset()  # e.g. {"If"}: subgraph ops this deployment needs
    static_shapes: bool = True  # no shape from the input's values (tests turn it off to meet the run's bounds)
    extra_ops: frozenset[str] = frozenset()  # ops past ALLOWED_OPS this deployment needs (and takes the risk of)

    def __post_init__(self) -> None:
        if self.max_nodes < 1 or self.max_initializer_elements < 1:
            raise ValueError("VettingPolicy caps must be >= 1")
        if not self.allowed_control_flow <= CONTROL_FLOW:
            raise ValueError(f"allowed_control_flow names ops outside {sorted(CONTROL_FLOW)}")


DEFAULT_POLICY = VettingPolicy()


def vet(data: bytes, policy: VettingPolicy = DEFAULT_POLICY) -> ModelSpec:
    """The file's serving metadata, or `ModelInvalid` naming the first rule it breaks."""
    model = pb.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RecursionError) as exc:
        raise ModelInvalid(f"cannot load the model: not an ONNX ModelProto ({type(exc).__name__})") from exc
    if not model.HasField("graph"):
        raise ModelInvalid("refused: the file holds no graph")
    _check_versions(model)
    if len(model.functions) or len(model.training_info):
        raise ModelInvalid("refused: model-local functions and training info are not served")
    nodes, elements = 0, 0
    for where, tensor in _tensors(model.graph, "graph"):
        _check_tensor(where, tensor)
        elements += _elements(tensor)
    for node in _nodes(model.graph):
        nodes += 1
        _check_node(node, policy)
    for node in _nodes(model.graph):  # NOTE: after every node's graph check: a subgraph op is named as such
        _check_allowed(node, policy)
    if policy.static_shapes:
        _check_static_shapes(model.graph)
    if nodes > policy.max_nodes:
        raise ModelInvalid(f"refused: {nodes} nodes exceed the cap of {policy.max_nodes}")
    if elements > policy.max_initializer_elements:
        raise ModelInvalid(
            f"refused: initializers declare {elements} elements, over the cap of {policy.max_initializer_elements}"
        )
    return _spec(model)


def _check_versions(model: Any) -> None:
    if model.ir_version not in SUPPORTED_IR:
        raise ModelInvalid(f"refused: IR version {model.ir_version} is outside {_span(SUPPORTED_IR)}")
    for opset in model.opset_import:
        supported = SUPPORTED_OPSETS.get(opset.domain)
        if supported is None:
            raise ModelInvalid(f"refused: op domain {_shown(opset.domain)} is not ai.onnx or ai.onnx.ml")
        if opset.version not in supported:
            domain = opset.domain or "ai.onnx"
            raise ModelInvalid(f"refused: {domain} opset {opset.version} is outside {_span(supported)}")


def _check_node(node: Any, policy: VettingPolicy) -> None:
    if node.domain not in SUPPORTED_OPSETS:
        raise ModelInvalid(f"refused: op {_shown(node.op_type)} of domain {_shown(node.domain)} is not a standard op")
    graphs = any(a.type in (_GRAPH, _GRAPHS) or a.HasField("g") or len(a.graphs) for a in node.attribute)
    if (graphs or node.op_type in CONTROL_FLOW) and node.op_type not in policy.allowed_control_flow:
        raise ModelInvalid(
            f"refused: {_shown(node.op_type)} carries a graph attribute (a subgraph op): not allowed in served models"
        )


def _check_allowed(node: Any, policy: VettingPolicy) -> None:
    allowed = ALLOWED_OPS.get(node.domain if node.domain != "ai.onnx" else "", frozenset())
    if node.op_type not in allowed and node.op_type not in policy.extra_ops | policy.allowed_control_flow:
        domain = node.domain or "ai.onnx"
        raise ModelInvalid(
            f"refused: op {_shown(node.op_type)} ({domain}) is not on the allow-list of served operators "
            "(docs/models.md)"
        )


def _check_static_shapes(graph: Any) -> None:
    """`ModelInvalid` when a shape input is computed from the graph input's values (a taint walk, in node order)."""
    initializers = {t.name for t in graph.initializer}
    tainted = {i.name for i in graph.input if i.name not in initializers}  # values an event chooses
    for node in graph.node:
        for position in SHAPE_INPUTS.get(node.op_type, ()):
            if position < len(node.input) and node.input[position] in tainted:
                raise ModelInvalid(
                    f"refused: input {position} of {node.op_type} {_shown(node.name or node.output[0])} comes from "
                    "the values of the graph's input: a shape an event could choose (only constants and shapes may size a tensor)"
                )
        if node.op_type not in _SHAPE_ONLY and any(name in tainted for name in node.input):
            tainted.update(node.output)


def _check_tensor(where: str, tensor: Any) -> None:
    if tensor.data_location == _EXTERNAL or len(tensor.external_data):
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        kind = "an absolute path" if location.startswith("/") else "a parent path" if ".." in location else "a file"
        raise ModelInvalid(
            f"refused: {where} {_shown(tensor.name)} keeps its data outside the model file "
            f"({kind}: {_shown(location)}); external data is never followed"
        )


def _nodes(graph: Any) -> Iterator[Any]:
    """Every node, subgraphs included (depth first)."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for sub in _subgraphs(attribute):
                yield from _nodes(sub)


def _subgraphs(attribute: Any) -> Iterator[Any]:
    if attribute.HasField("g"):
        yield attribute.g
    yield from attribute.graphs


def _tensors(graph: Any, where: str) -> Iterator[tuple[str, Any]]:
    """Every tensor a graph carries: initializers, sparse ones, node attributes, subgraphs'."""
    for tensor in graph.initializer:
        yield f"{where} initializer", tensor
    for sparse in graph.sparse_initializer:
        yield f"{where} sparse initializer", sparse.values
        yield f"{where} sparse initializer", sparse.indices
    for node in graph.node:
        for attribute in node.attribute:
            label = f"attribute {attribute.name[:40]!r} of {node.op_type[:40]!r}:"
            if attribute.HasField("t"):
                yield label, attribute.t
            for tensor in attribute.tensors:
                yield label, tensor
            for sparse in [attribute.sparse_tensor, *attribute.sparse_tensors]:
                yield label, sparse.values
                yield label, sparse.indices
            for sub in _subgraphs(attribute):
                yield from _tensors(sub, "subgraph")


def _elements(tensor: Any) -> int:
    return prod(max(d, 0) for d in tensor.dims) if len(tensor.dims) else 1


def _spec(model: Any) -> ModelSpec:
    """The serving metadata checked against the graph's own inputs and outputs."""
    props = {p.key: p.value for p in model.metadata_props}
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in initializers]
    if not inputs or not model.graph.output:
        raise ModelInvalid("refused: the graph declares no input or no output")
    return ModelSpec.from_metadata(props, inputs, [o.name for o in model.graph.output])


def _span(versions: range) -> str:
    return f"{versions.start}..{versions.stop - 1}"


def _shown(text: str) -> str:
    return repr(text[:80])
