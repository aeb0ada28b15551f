"""Schemathesis hooks for `make fuzz` (loaded with SCHEMATHESIS_HOOKS=bench.fuzz_hooks).

They count every request schemathesis sends and every answer (by status), the requests that
got no answer (a timeout or a dropped connection), and error answers that are not a JSON
error; and they add the check `json_error_bodies`: an answer >= 400 is `application/json`
holding an object with a string `error` (the V2 readiness routes excepted: the protocol
answers 400 `{"ready": false}` there). When the run ends the counts go to the JSON file
that FUZZ_COUNTS names (bench/fuzz.py reads it).
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from collections import Counter
from typing import Any

import schemathesis

__all__ = ["counts", "error_problem", "json_error_bodies"]

_lock = threading.Lock()
_statuses: Counter[int] = Counter()
_operations: dict[str, Counter[str]] = {}  # "POST /api/score" -> {"2xx": n, "4xx": n, "5xx": n, "none": n}
_unanswered: list[str] = []
_not_json: list[str] = []
_not_json_count = Counter[str]()
_slowest: dict[str, float] = {"s": 0.0}
_slowest_request: list[str] = [""]
EXAMPLES = 20  # offending requests kept, per kind


def error_problem(status: int, content_type: str, body: bytes, path: str) -> str | None:
    """Why an answer >= 400 is not a JSON error (None: it is one)."""
    if status < 400:
        return None
    if content_type.partition(";")[0].strip().lower() != "application/json":
        return f"content-type {content_type!r}"
    try:
        found = json.loads(body)
    except ValueError:
        return "a body that is not JSON"
    if not isinstance(found, dict):
        return "JSON that is not an object"
    if isinstance(found.get("error"), str):
        return None
    if status == 400 and path.rstrip("/").endswith("/ready") and found.get("ready") is False:
        return None  # NOTE: V2 readiness: the protocol's 4xx carries {"ready": false}
    return "an object without a string `error`"


def _content_type(response: Any) -> str:
    values = response.headers.get("content-type") or [""]
    return str(values[0])


def _label(case: Any) -> str:
    return f"{case.method} {case.formatted_path}"


def _count(case: Any, kind: str) -> None:
    _operations.setdefault(case.operation.label, Counter())[kind] += 1


@schemathesis.hook
def after_call(context: Any, case: Any, response: Any) -> None:
    problem = error_problem(response.status_code, _content_type(response), response.content, case.formatted_path)
    with _lock:
        _statuses[response.status_code] += 1
        _count(case, f"{response.status_code // 100}xx")
        if response.elapsed > _slowest["s"]:
            _slowest["s"], _slowest_request[0] = response.elapsed, _label(case)
        if problem is not None:
            _not_json_count["all"] += 1
            if len(_not_json) < EXAMPLES:
                _not_json.append(f"{_label(case)} -> {response.status_code}: {problem}")


@schemathesis.hook
def after_network_error(context: Any, case: Any, request: Any) -> None:
    with _lock:
        _unanswered.append(_label(case))
        _count(case, "none")


@schemathesis.check
def json_error_bodies(ctx: Any, response: Any, case: Any) -> bool | None:
    """An answer >= 400 is a JSON error (`{"error": ...}`)."""
    problem = error_problem(response.status_code, _content_type(response), response.content, case.formatted_path)
    if problem is not None:
        raise AssertionError(f"{response.status_code} with {problem}, not a JSON error")
    return None


def counts() -> dict[str, Any]:
    """What this process has counted so far."""
    with _lock:
        return {
            "statuses": {str(k): v for k, v in sorted(_statuses.items())},
            "operations": {label: dict(sorted(c.items())) for label, c in sorted(_operations.items())},
            "unanswered": len(_unanswered),
            "unanswered_examples": _unanswered[:EXAMPLES],
            "not_json_errors": _not_json_count["all"],
            "not_json_examples": list(_not_json),
            "slowest_s": round(_slowest["s"], 4),
            "slowest_request": _slowest_request[0],
        }


def _write() -> None:
    path = os.environ.get("FUZZ_COUNTS")
    if path:
        with open(path, "w") as out:
            json.dump(counts(), out)


atexit.register(_write)
