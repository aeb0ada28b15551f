"""Upload a model version to the models container (Azurite locally, Blob storage in Azure).

    ModelStorage=UseDevelopmentStorage=true .venv/bin/python scripts/upload_model.py models/fraud/1/model.onnx fraud 1

The Blob trigger picks it up (`models/{name}/{version}/model.onnx`) and swaps it in.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from azure.storage.blob import BlobServiceClient

from shared.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", type=Path)
    parser.add_argument("name")
    parser.add_argument("version")
    args = parser.parse_args()
    settings = Settings.from_env()
    if settings.model_storage:
        service = BlobServiceClient.from_connection_string(settings.model_storage)
    elif settings.model_storage_blob_uri:
        from azure.identity import DefaultAzureCredential

        service = BlobServiceClient(settings.model_storage_blob_uri, credential=DefaultAzureCredential())
    else:
        raise SystemExit("set ModelStorage (connection string) or ModelStorage__blobServiceUri")
    container = service.get_container_client(settings.models_container)
    if not container.exists():
        container.create_container()
    blob = f"{args.name}/{args.version}/model.onnx"
    container.upload_blob(blob, args.file.read_bytes(), overwrite=True)
    print(f"uploaded {args.file} to {settings.models_container}/{blob}")


if __name__ == "__main__":
    main()
