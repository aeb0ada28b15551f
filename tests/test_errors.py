"""The error tree: every class carries an HTTP status, a gRPC status and a queue verdict."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from shared import errors

GRPC_CODES = {
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
    "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}  # fmt: skip  # grpc.StatusCode's members (grpc is not a dependency yet)
CLASSES = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.ScoringError)]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_error_is_drawn_in_the_tree_with_its_status_and_grpc_code(cls: type[errors.ScoringError]) -> None:
    tree = errors.__doc__ or ""
    line = next((ln for ln in tree.splitlines() if re.search(rf"\b{cls.__name__}\b", ln)), None)
    assert line is not None, f"{cls.__name__} is not drawn in shared/errors.py"
    assert str(cls.status) in line and cls.code in line and cls.grpc_status in line, line
    assert cls.grpc_status in GRPC_CODES
    assert 400 <= cls.status < 600


def test_the_message_fault_is_rejected_and_the_service_state_is_retried() -> None:
    assert not errors.InvalidEvent("x").retryable and not errors.ModelNotFound("x").retryable
    assert (
        errors.NotReady("x").retryable and errors.SettingsError("x").retryable and errors.BatcherClosed("x").retryable
    )


def test_no_other_module_defines_an_error_class() -> None:
    for path in (Path(errors.__file__).parent).rglob("*.py"):
        if path.name != "errors.py":
            assert not re.search(r"^class \w+\((\w+Error|NotReady|Exception|ValueError)\)", path.read_text(), re.M), (
                path
            )
