from pathlib import Path

import pytest

from shared.errors import ModelInvalid, ModelSourceError
from shared.models.repository import (
    BlobRepository,
    DirectoryRepository,
    ModelRef,
    check_ref,
    parse_model_path,
    version_key,
)
from tests.onnx_models import make_model


@pytest.mark.parametrize(
    ("path", "container", "ref"),
    [
        ("fraud/2/model.onnx", None, ModelRef("fraud", "2")),
        ("models/fraud/10/model.onnx", "models", ModelRef("fraud", "10")),
        ("models/fraud/10/model.onnx", None, None),
        ("fraud/2/weights.bin", None, None),
        ("fraud/model.onnx", None, None),
        ("../etc/2/model.onnx", None, None),
    ],
)
def test_parse_model_path(path: str, container: str | None, ref: ModelRef | None) -> None:
    assert parse_model_path(path, container=container) == ref


def test_versions_sort_numerically() -> None:
    assert sorted(["10", "2", "1"], key=version_key) == ["1", "2", "10"]


def test_directory_source_lists_and_reads(models_dir: Path) -> None:
    (models_dir / "fraud" / "2").mkdir()
    (models_dir / "fraud" / "2" / "model.onnx").write_bytes(b"v2")
    (models_dir / "README.txt").write_text("ignored")
    source = DirectoryRepository(models_dir)
    assert source.list() == [ModelRef("fraud", "1"), ModelRef("fraud", "2")]
    assert source.read(ModelRef("fraud", "2")) == b"v2"


def test_directory_source_errors_are_model_source_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError):
        DirectoryRepository(tmp_path / "absent").list()
    with pytest.raises(ModelSourceError):
        DirectoryRepository(tmp_path).read(ModelRef("x", "1"))


def test_blob_source_against_azurite(azurite_connection: str) -> None:
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(azurite_connection)
    container = service.get_container_client("models-source-test")
    if not container.exists():
        container.create_container()
    data = make_model(bias=1.0)
    container.upload_blob("fraud/3/model.onnx", data, overwrite=True)
    container.upload_blob("fraud/3/notes.txt", b"ignored", overwrite=True)

    source = BlobRepository.connect(container="models-source-test", connection_string=azurite_connection, blob_uri=None)
    assert ModelRef("fraud", "3") in source.list()
    assert source.read(ModelRef("fraud", "3")) == data
    with pytest.raises(ModelSourceError):
        source.read(ModelRef("fraud", "999"))
    container.delete_container()


@pytest.mark.parametrize(
    "path",
    [
        "models/fraud/" + "9" * 64 + "/model.onnx",  # the version that became active for good
        "models/../../model.onnx",
        "models/../x/1/model.onnx",
        "models/fraud/01/model.onnx",
        "models/fraud/0/model.onnx",
        "models/fraud/v2/model.onnx",
        "models/fr.aud/2/model.onnx",
        "models/" + "a" * 65 + "/2/model.onnx",
        "models/fraud/2/model.onnx\n",
    ],
)
def test_a_path_with_a_bad_name_or_version_is_no_model(path: str) -> None:
    assert parse_model_path(path, container="models") is None


def test_names_and_versions_are_checked_for_every_caller() -> None:
    assert check_ref("fraud-v2_b", "123456789") == ModelRef("fraud-v2_b", "123456789")
    for name, version in (("..", "1"), ("fraud", "9" * 10), ("fraud", "1.5"), ("", "1")):
        with pytest.raises(ModelInvalid, match="must"):
            check_ref(name, version)


def test_a_model_over_max_model_bytes_is_refused_before_it_is_read(models_dir: Path) -> None:
    big = models_dir / "fraud" / "2"
    big.mkdir()
    (big / "model.onnx").write_bytes(b"\0" * 4096)
    with pytest.raises(ModelInvalid, match="MAX_MODEL_BYTES"):
        DirectoryRepository(models_dir, max_bytes=1024).read(ModelRef("fraud", "2"))


def test_a_blob_over_the_cap_is_refused_before_its_body_is_read(azurite_connection: str) -> None:
    from azure.storage.blob import BlobServiceClient

    container = BlobServiceClient.from_connection_string(azurite_connection).get_container_client("models-cap-test")
    if not container.exists():
        container.create_container()
    try:
        container.upload_blob("fraud/4/model.onnx", b"\0" * 8192, overwrite=True)
        source = BlobRepository.connect(
            container="models-cap-test", connection_string=azurite_connection, blob_uri=None, max_bytes=4096
        )
        with pytest.raises(ModelInvalid, match="8192 bytes exceeds MAX_MODEL_BYTES"):
            source.read(ModelRef("fraud", "4"))
    finally:
        container.delete_container()
