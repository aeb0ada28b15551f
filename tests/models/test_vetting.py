"""Static refusal: crafted model files are refused, with their reason, before ONNX Runtime sees them."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from shared.errors import ModelInvalid
from shared.models.onnx import OnnxModel
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository, ModelRef
from shared.models.vetting import VettingPolicy, vet
from shared.settings import BatchPolicy, OrtOptions
from tests.models import hostile
from tests.onnx_models import make_model

SECRET = 0.4375  # a float a replica's file holds (exactly representable)
# NOTE: with graph optimizations off ONNX Runtime reads an external initializer from bytes and
# serves (with them on, this graph's optimizer stops first on the empty model path; other graphs do not)
NO_OPT = OrtOptions(graph_optimization="disable")


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.bin"
    path.write_bytes(struct.pack("<f", SECRET))
    return path


def test_onnxruntime_itself_follows_external_data_from_bytes(secret: Path) -> None:
    """Why the check exists: without it, the file's bytes come back through the score (docs/platform.md)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(hostile.external_data(str(secret)), options, providers=["CPUExecutionProvider"])
    bias = session.run(None, {"features": np.zeros((1, 4), dtype=np.float32)})[0][0, 1]
    assert bias == pytest.approx(1 / (1 + np.exp(-SECRET)))


@pytest.mark.parametrize("kind", ["absolute", "parent"])
def test_external_data_is_refused_before_onnxruntime_reads_it(secret: Path, kind: str) -> None:
    location = str(secret) if kind == "absolute" else os.path.relpath(secret, Path.cwd())
    assert kind == "absolute" or location.startswith("..")
    with pytest.raises(ModelInvalid, match=f"keeps its data outside the model file \\(an? {kind}"):
        OnnxModel.load(hostile.external_data(location), NO_OPT)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (hostile.external_data("weights.bin"), r"keeps its data outside the model file \(a file: 'weights.bin'\)"),
        (hostile.custom_domain(), r"op domain 'com.example.evil' is not ai.onnx or ai.onnx.ml"),
        (hostile.control_flow("Loop"), r"'Loop' carries a graph attribute \(a subgraph op\)"),
        (hostile.control_flow("If"), r"'If' carries a graph attribute \(a subgraph op\)"),
        (hostile.many_nodes(10_001), r"nodes exceed the cap of 10000"),
        (hostile.huge_initializer(70_000_000), r"initializers declare 70000\d+ elements, over the cap"),
        (hostile.versions(ir=99), r"IR version 99 is outside 3..11"),
        (hostile.versions(opset=99), r"ai.onnx opset 99 is outside 7..23"),
        (hostile.thresholds(0.9, 0.5), r"0 <= review <= decline <= 1, got 0.9, 0.5"),
        (hostile.thresholds(0.2, 1.5), r"0 <= review <= decline <= 1, got 0.2, 1.5"),
        (hostile.thresholds(float("nan"), 0.5), r"0 <= review <= decline <= 1, got nan"),
        (hostile.undeclared_domain(), r"op 'Steal' of domain 'com.example.evil' is not a standard op"),
        (hostile.local_function(), r"model-local functions and training info are not served"),
        (hostile.no_outputs(), r"declares no input or no output"),
        (b"", r"holds no graph"),
        (b"\x0a\xff\xff\xff\xff\x0f", r"not an ONNX ModelProto"),
    ],
    ids=[
        "external-file",
        "custom-domain",
        "loop",
        "if",
        "nodes",
        "initializer",
        "ir",
        "opset",
        "review-over-decline",
        "decline-over-1",
        "nan",
        "undeclared-domain",
        "function",
        "no-outputs",
        "empty",
        "not-protobuf",
    ],
)
def test_each_crafted_file_is_refused_with_its_reason(data: bytes, reason: str) -> None:
    with pytest.raises(ModelInvalid, match=reason):
        vet(data)


def test_the_files_we_serve_pass(models_dir: Path) -> None:
    assert vet(make_model()).width == 4
    assert vet((Path(__file__).parents[2] / "models" / "fraud" / "1" / "model.onnx").read_bytes()).width > 4


def test_a_deployment_may_allow_a_subgraph_op_it_needs() -> None:
    assert vet(hostile.control_flow("If"), VettingPolicy(allowed_control_flow=frozenset({"If"}))).width == 4
    with pytest.raises(ValueError, match="outside"):
        VettingPolicy(allowed_control_flow=frozenset({"Steal"}))


async def test_the_registry_refuses_with_the_reason_in_last_error_and_serves_on(models_dir: Path, secret: Path) -> None:
    registry = ModelRegistry(DirectoryRepository(models_dir), NO_OPT, BatchPolicy(window_ms=5, max_size=8))
    await registry.load_all()
    try:
        with pytest.raises(ModelInvalid):
            await registry.install("fraud", "2", hostile.external_data(str(secret)))
        error = registry.last_error("fraud")
        assert error.version == "2" and "keeps its data outside the model file (an absolute path" in error.reason
        assert registry.active("fraud").version == "1" and registry.loaded_versions("fraud") == ["1"]
    finally:
        await registry.aclose()


# -- what a served scoring model never needs: an allow-list, static shapes, no graph attributes ----------

INPUT_SIZED = ["ConstantOfShape", "Expand", "Tile", "Range", "MatMul"]
GROWING = frozenset({"ConstantOfShape", "Expand", "Tile", "Range"})


@pytest.mark.parametrize("op", INPUT_SIZED)
def test_an_op_that_grows_a_tensor_from_a_value_is_not_on_the_allow_list(op: str) -> None:
    shown = "Expand" if op == "MatMul" else op  # the n x n product is made by an Expand first
    with pytest.raises(ModelInvalid, match=rf"op '{shown}' \(ai.onnx\) is not on the allow-list"):
        vet(hostile.input_sized(op))


@pytest.mark.parametrize("op", INPUT_SIZED)
def test_allowed_by_a_deployment_an_input_sized_op_is_still_refused_for_its_shape(op: str) -> None:
    """The mutation check of the allow-list: with it opened, the static-shape rule still refuses each file."""
    opened = VettingPolicy(extra_ops=GROWING)
    with pytest.raises(ModelInvalid, match=r"comes from the values of the graph's input"):
        vet(hostile.input_sized(op), opened)
    assert vet(hostile.input_sized(op), VettingPolicy(extra_ops=GROWING, static_shapes=False)).width == 4


def test_a_shape_read_from_the_input_values_is_refused_even_with_allowed_ops() -> None:
    with pytest.raises(ModelInvalid, match=r"input 1 of Reshape .* comes from the values of the graph's input"):
        vet(hostile.value_shaped_reshape())
    assert vet(hostile.value_shaped_reshape(), VettingPolicy(static_shapes=False)).width == 4  # the rule alone


def test_a_shape_from_the_input_shape_alone_is_static_enough() -> None:
    """Shape → Reshape (as exporters flatten): sized by the batch axis, never by a value."""
    import onnx
    from onnx import helper

    model = onnx.load_from_string(make_model())
    sigmoid = next(n for n in model.graph.node if n.op_type == "Sigmoid")
    sigmoid.input[0] = "z_"
    at = list(model.graph.node).index(sigmoid)
    model.graph.node.insert(at, helper.make_node("Shape", ["z"], ["z_shape"]))
    model.graph.node.insert(at + 1, helper.make_node("Reshape", ["z", "z_shape"], ["z_"]))
    assert vet(model.SerializeToString()).width == 4


def test_sequence_map_carries_a_graph_and_is_refused() -> None:
    with pytest.raises(ModelInvalid, match=r"'SequenceMap' carries a graph attribute \(a subgraph op\)"):
        vet(hostile.sequence_map())


def test_without_the_graph_attribute_rule_sequence_map_would_pass_the_allow_list_check_only_by_name() -> None:
    """The mutation check of the graph-attribute rule: a deployment that lets SequenceMap through by name
    still meets the rule, because it carries a graph (an op named in `extra_ops` is not a subgraph pass)."""
    with pytest.raises(ModelInvalid, match=r"carries a graph attribute"):
        vet(
            hostile.sequence_map(),
            VettingPolicy(extra_ops=frozenset({"SequenceConstruct", "SequenceMap", "SequenceAt"})),
        )


def test_the_allow_list_holds_what_our_trainers_emit() -> None:
    demo = (Path(__file__).parents[2] / "models" / "fraud" / "1" / "model.onnx").read_bytes()
    assert vet(demo).width > 4 and vet(make_model()).width == 4


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        *[(hostile.input_sized(op), "is not on the allow-list") for op in INPUT_SIZED],
        (hostile.sequence_map(), "carries a graph attribute"),
        (hostile.value_shaped_reshape(), "comes from the values of the graph's input"),
    ],
    ids=[*INPUT_SIZED, "SequenceMap", "value-shaped-Reshape"],
)
async def test_each_hostile_file_published_as_a_version_is_refused_with_its_reason_in_last_error(
    models_dir: Path, data: bytes, reason: str
) -> None:
    registry = ModelRegistry(DirectoryRepository(models_dir), OrtOptions(), BatchPolicy(max_size=8))
    await registry.load_all()
    try:
        DirectoryRepository(models_dir).publish(ModelRef("fraud", "2"), data)
        assert await registry.load(ModelRef("fraud", "2")) is None
        error = registry.last_error("fraud")
        assert error is not None and error.version == "2" and reason in error.reason
        assert registry.active("fraud").version == "1"
    finally:
        await registry.aclose()
