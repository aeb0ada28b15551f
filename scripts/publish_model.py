"""Publish a model version to the configured source: MODELS_DIR, or the Blob container.

    make publish-model NAME=fraud VERSION=2 FILE=path/to/model.onnx

The file is checked first (no larger than MAX_MODEL_BYTES, which every replica would refuse; it must
load, warm and declare its serving metadata), then put in place whole: `{name}/{version}/model.onnx`
in MODELS_DIR (an atomic rename), or in MODELS_CONTAINER when ModelStorage /
ModelStorage__blobServiceUri is set (Azurite locally, Blob storage in Azure, where the Blob trigger
fires on one replica). Every replica picks it up: the one that loads it first records it in Redis
and the others follow within about a second; without Redis each replica's poll (MODEL_POLL_SECONDS)
finds it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shared.core.wiring import model_repository
from shared.errors import ScoringError
from shared.models.onnx import OnnxModel
from shared.models.repository import ModelRef, check_ref, check_size
from shared.settings import Settings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name")
    parser.add_argument("version")
    parser.add_argument("file", type=Path)
    args = parser.parse_args()
    settings = Settings.from_env()
    try:
        ref = check_ref(args.name, args.version)
        check_size(args.file.stat().st_size, settings.max_model_bytes, ref)  # NOTE: every replica would refuse it
        data = args.file.read_bytes()
        OnnxModel.load(data, settings.ort).warm(
            settings.batch.max_size
        )  # NOTE: refuse a bad file here, not on every replica
        source = model_repository(settings)
        source.publish(ModelRef(*ref), data)
    except ScoringError as exc:
        print(f"publish-model: {exc.detail}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"publish-model: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"published {ref.name}/{ref.version} ({len(data)} bytes) to {source.description}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
