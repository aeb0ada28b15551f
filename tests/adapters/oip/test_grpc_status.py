"""Every error class names a real gRPC status: the gRPC adapter answers `grpc.StatusCode[name]`."""

from __future__ import annotations

import grpc

import shared.errors as errors


def test_every_error_class_names_a_grpc_status_code() -> None:
    found = [getattr(errors, name) for name in errors.__all__]
    classes = [c for c in found if isinstance(c, type) and issubclass(c, errors.ScoringError)]  # the answered tree
    unknown = {c.__name__: c.grpc_status for c in classes if c.grpc_status not in grpc.StatusCode.__members__}
    assert classes and unknown == {}
