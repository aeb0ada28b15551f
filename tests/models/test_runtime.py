import logging

import numpy as np
import pytest

from shared.errors import InferenceFailed, ModelInvalid
from shared.models.onnx import OnnxModel, choose_providers, gpu_usable
from shared.settings import OrtOptions
from tests.onnx_models import make_model


def test_loads_predicts_one_score_per_row() -> None:
    model = OnnxModel.load(make_model(), OrtOptions())
    scores = model.predict(np.zeros((5, 4), dtype=np.float32))
    assert scores.shape == (5,)
    assert np.allclose(scores, 0.5)  # sigmoid(0)


def test_cpu_only_machine_gets_cpu_provider_without_error_logs(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    if gpu_usable():
        pytest.skip("this machine has a GPU")
    caplog.set_level(logging.WARNING)
    assert choose_providers(OrtOptions(use_gpu=True, use_tensorrt=True)) == ["CPUExecutionProvider"]
    model = OnnxModel.load(make_model(), OrtOptions())
    model.warm(8)
    assert model.providers == ["CPUExecutionProvider"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "error" not in capfd.readouterr().err.lower()


def test_the_real_demo_model_is_servable() -> None:
    with open("models/fraud/1/model.onnx", "rb") as f:
        model = OnnxModel.load(f.read(), OrtOptions())
    model.warm(8)
    assert model.spec.width == len(model.spec.features) > 10


def test_garbage_bytes_are_model_invalid() -> None:
    with pytest.raises(ModelInvalid, match="cannot load"):
        OnnxModel.load(b"not an onnx file", OrtOptions())


def test_model_without_serving_metadata_is_invalid() -> None:
    with pytest.raises(ModelInvalid, match=r"serving\.features"):
        OnnxModel.load(make_model(metadata={}), OrtOptions())


def test_metadata_width_must_match_the_input() -> None:
    from shared.domain.spec import FeatureDef, ModelSpec, Thresholds

    wrong = ModelSpec((FeatureDef("a", 0.0),), "features", "probabilities", 1, Thresholds(0.5, 0.9)).to_metadata()
    with pytest.raises(ModelInvalid, match="declares 1 features"):
        OnnxModel.load(make_model(metadata=wrong), OrtOptions())


def test_a_failing_run_is_inference_failed() -> None:
    model = OnnxModel.load(make_model(), OrtOptions())
    with pytest.raises(InferenceFailed):
        model.predict(np.zeros((2, 3), dtype=np.float32))  # wrong width


def test_released_model_refuses_to_run() -> None:
    model = OnnxModel.load(make_model(), OrtOptions())
    model.release()
    with pytest.raises(InferenceFailed):
        model.predict(np.zeros((1, 4), dtype=np.float32))


@pytest.mark.parametrize("level", ["disable", "basic", "extended", "all"])
def test_session_options_come_from_settings(level: str) -> None:
    model = OnnxModel.load(make_model(), OrtOptions(intra_op_threads=2, graph_optimization=level))  # type: ignore[arg-type]
    assert model.predict(np.ones((1, 4), dtype=np.float32)).shape == (1,)
