"""The OpenAPI 3.1 document of the HTTP API, served at `GET /api/openapi.json`.

Built in code, once per app, on the first request for it: never on the Functions import
path, never on the fast path. Every operation is derived from the route table
(shared/adapters/http/routes.py), so that the document cannot drift from what is served:

- its operationId, summary, tag, method and security are the table's (`auth`: a probe takes no
  key; any other route a function key, which the host checks, answering 401 itself);
- its parameters come from the path template (and `?explain` where the answer is `Scored`);
- its request body is the decoder's own type (msgspec's JSON Schema of `PaymentEvent`,
  `Activation`, `CanarySplit`, `ControlNote`; patterns made ECMA-262), so what the document says
  is accepted is what is decoded; a control action's body carries the note's `reason` beside
  its own fields;
- its answer is the answer's own type (shared/domain/answers.py, whose structs the adapters
  encode), so what the document says is answered is what is written;
- its error answers are the error classes the table names (shared/errors.py): each status with
  the codes it may carry, Retry-After where a class says when to come back; a path with a
  parameter may also get the router's 404 `not_found` (a parameter that is not one segment);
- what no type describes (routes.Written: the batch envelope and the V2 inference request, read
  by hand; the Prometheus text; this document) is written here, with MAX_BATCH_ITEMS.

Two error shapes, as the app answers: `/api/...` `{"error": code, "detail": message}`
(`ErrorBody`), V2 `{"error": message}` (`V2Error`, the protocol's). tests/adapters/http/test_openapi.py
holds the document to the routes the app serves (Starlette's and the Functions host's) and to
real answers; `make fuzz` sends schemathesis at it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, get_args

import msgspec
import orjson

from shared import errors
from shared.adapters.http.routes import ROUTES, Op, RouteSpec, Tag, Written
from shared.domain import answers
from shared.domain.control import ControlNote
from shared.domain.events import EXAMPLE_EVENT, TEXT_FIELDS, Activation, CanarySplit, PaymentEvent
from shared.domain.outcomes import OutcomeBatch

__all__ = ["OPENAPI_PATH", "document", "document_bytes"]

OPENAPI_PATH = "/api/openapi.json"
Schema = dict[str, Any]
Struct = type[msgspec.Struct]

STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
NO_CONTROL = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"  # shared/domain/events.py: no text field admits one
NOT_FOUND = "not_found"  # the router's 404 (shared/adapters/http/app.py): the /api shape, V2's on /v2 paths
# answer the router's 404 while switched off (app.py: no class for it): TELEMETRY=false, PREDICTION_LOG=off
SWITCHED_OFF = {"metrics", "outcomes"}


def _ref(name: str) -> Schema:
    return {"$ref": answers.REF.format(name=name)}


def _array(items: Schema, **limits: int) -> Schema:
    return {"type": "array", "items": items, **limits}


def _object(required: Mapping[str, Schema], optional: Mapping[str, Schema] | None = None) -> Schema:
    """An object with these `required` and `optional` properties (others allowed)."""
    return {"type": "object", "properties": {**required, **(optional or {})}, "required": list(required)}


def _json(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


# -- what each type is, said once -----------------------------------------------------------

TAKEN: dict[Struct, str] = {  # a request body
    PaymentEvent: "one payment event (at most MAX_BODY_BYTES)",
    Activation: "the version to pin or shadow (at most 1 KiB)",
    CanarySplit: "the candidate and the share of users it scores (at most 1 KiB)",
    ControlNote: "why, kept with the action in the fleet's audit (at most 1 KiB; none: no reason)",
    OutcomeBatch: "outcomes learned later, each checked on its own (at most MAX_BATCH_ITEMS)",
}
OUTCOME_EXAMPLE = {
    "event_id": "evt-1001",
    "outcome": "fraud",
    "source": "chargeback",
    "learned_at": "2026-11-20T09:00:00Z",
}
EXAMPLES: dict[Struct, object] = {
    PaymentEvent: EXAMPLE_EVENT,
    Activation: {"version": "1"},
    CanarySplit: {"version": "2", "weight": 0.1},
    ControlNote: {"reason": "rollback: declines doubled"},
    OutcomeBatch: {"outcomes": [OUTCOME_EXAMPLE]},
}
ANSWERED: dict[Struct, str] = {  # a 200 answer
    answers.Scored: "the risk score and the decision",
    answers.Batch: "one answer per event, in order",
    answers.ModelList: "every served name",
    answers.ModelView: "the model as it serves now",
    answers.RolloutView: "the model's rollout as it is now",
    answers.ReviewRecord: "the kept review: done, pending or failed",
    answers.Stats: "the counters of this replica",
    answers.OutcomeReceipt: "each outcome written, a duplicate, or refused with its slot and code",
    answers.Liveness: "the process answers",
    answers.Readiness: "ready; `degraded` lists what serves with less than it should",
    answers.V2ServerMetadata: "the server",
    answers.V2Live: "live",
    answers.V2Ready: "ready",
    answers.V2ModelMetadata: "the model's versions, platform, tensors and input columns",
    answers.V2ModelReady: "it serves",
    answers.V2InferHead: "one score per row: JSON, or binary outputs when asked (`binary_data_output`)",
}
UNREADY: dict[Struct, str] = {  # the same answer, while not ready (Op.unready)
    answers.Readiness: "not ready; `detail` says why",
    answers.V2Ready: "not ready (the protocol's 4xx)",
    answers.V2ModelReady: "it does not serve (the protocol's 4xx)",
}
WHY = {  # an error status
    400: "the body is not JSON, or was cut off or malformed on the wire",
    401: "under the Functions host only: the function key is missing or wrong (the host answers, no body)",
    404: "not found",
    408: "the body did not arrive whole within BODY_TIMEOUT_MS",
    413: "the body is over its cap (MAX_BODY_BYTES; 16 times that for a batch or a V2 request)",
    415: "the content-type is not application/json",
    409: "the change conflicts with how the model serves now (the detail says what to do first)",
    422: "the body is JSON but not what the route takes (the detail names the field)",
    500: "the model run failed",
    503: "the service cannot answer now (models loading, a bad setting, the model source down; or, on the "
    "scoring routes, overloaded or past REQUEST_TIMEOUT_MS, with Retry-After); retry later",
}
RETRY_AFTER = {
    "Retry-After": {
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
        "description": "seconds to wait before retrying (`overloaded`, `deadline_exceeded`)",
    }
}
PARAMS: dict[str, Schema] = {
    "name": {"name": "name", "in": "path", "required": True, "schema": STR, "example": "fraud",
             "description": "a model or ensemble"},
    "version": {"name": "version", "in": "path", "required": True, "schema": STR, "example": "1",
                "description": "a loaded version"},
    "event_id": {"name": "event_id", "in": "path", "required": True, "schema": STR, "example": "evt-1001"},
    "explain": {"name": "explain", "in": "query", "required": False, "schema": {"enum": ["1", "true", "0", "false"]},
                "description": "1: a review or decline answer names the features behind its score (`reasons`; "
                "occlusion, within 5 ms)"},
    "header_length": {"name": "Inference-Header-Content-Length", "in": "header", "required": False,
                      "schema": {"type": "integer", "minimum": 0},
                      "description": "binary-data extension: the length of the JSON header that starts the body"},
}  # fmt: skip

# -- what no type describes: read or written by hand ----------------------------------------

# the demo model's 25 columns (`parameters.features` of GET /v2/models/fraud), two rows
ROWS = [
    [4.8, 3, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 60, 2, 400, 0, 1],
    [3.2, 14, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 45, 1, 900, 0, 1],
]
DATATYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64"]
PARAMETERS: Schema = {"type": "object"}
INFER_REQUEST = _object(  # shared/adapters/oip/rest.py reads it by hand
    {
        "inputs": _array(
            _object(
                {"name": STR, "datatype": {"enum": [*DATATYPES, "BYTES"]}, "shape": _array(INT)},
                {
                    "data": {
                        "description": "flat or nested (row-major) elements: numbers, booleans or strings (BYTES)",
                        "type": "array",
                        "items": {"type": ["number", "boolean", "string", "array"]},
                    },
                    "parameters": PARAMETERS,
                },
            )
        )
    },
    {"id": STR, "parameters": PARAMETERS, "outputs": _array(_object({"name": STR}, {"parameters": PARAMETERS}))},
)
INFER_REQUEST["examples"] = [
    {"id": "r1", "inputs": [{"name": "features", "datatype": "FP32", "shape": [2, 25], "data": ROWS}]}
]
BYTES: Schema = {}  # OpenAPI 3.1 for bytes of any form: no schema


def _written(kind: Written, max_batch_items: int) -> Schema:
    """The request body or answer `kind`."""
    if kind == "EventBatch":
        envelope = _object({"events": _array(_ref("PaymentEvent"), minItems=1, maxItems=max_batch_items)})
        envelope["examples"] = [{"events": [EXAMPLE_EVENT, {**EXAMPLE_EVENT, "event_id": "evt-1002", "amount": 12.5}]}]
        described = "events scored in order; an item that is not a valid event gets its own error in its slot"
        return {"required": True, **_json(envelope, described)}
    if kind == "V2InferRequest":
        described = ("JSON, or JSON then binary tensors (binary-data extension; Inference-Header-Content-Length "
                     "says where the JSON ends). Any content-type is read so.")  # fmt: skip
        content = {"application/json": {"schema": _ref("V2InferRequest")}, "application/octet-stream": BYTES}
        return {"required": True, "description": described, "content": content}
    if kind == "PrometheusText":
        return {"description": "Prometheus text exposition format 0.0.4", "content": {"text/plain": {"schema": STR}}}
    return _json(_object({"openapi": STR, "info": {"type": "object"}}), "OpenAPI 3.1")


# -- the components: the types' own schemas -------------------------------------------------


def _components(routes: tuple[RouteSpec, ...]) -> dict[str, Schema]:
    ops = [op for spec in routes for op in spec.ops]
    taken = [op.body for op in ops if isinstance(op.body, type)]
    given = [op.answer for op in ops if isinstance(op.answer, type)]
    noted = {op.body for spec in routes if spec.auth == "admin" for op in spec.ops if isinstance(op.body, type)}
    schemas = {
        **_decoded(list(dict.fromkeys(taken)), noted - {ControlNote, OutcomeBatch}),  # outcomes are data: no note
        "V2InferRequest": INFER_REQUEST,
        **_answered([*dict.fromkeys(given), answers.ErrorBody, answers.V2Error]),
    }
    return dict(sorted(schemas.items()))  # by name: the table's order does not move them


def _decoded(types: list[Struct], noted: set[Struct]) -> dict[str, Schema]:
    """The request bodies as msgspec decodes them, patterns written for any validator; a body in
    `noted` (a control action's) also carries `ControlNote`'s fields (shared/domain/control.py)."""
    _, schemas = msgspec.json.schema_components([*types, ControlNote], ref_template=answers.REF)
    for schema in schemas.values():
        for prop in schema["properties"].values():
            if "pattern" in prop:  # Python's \A ... \Z is ECMA-262's ^ ... $ (no multiline flag)
                prop["pattern"] = "^" + prop["pattern"].removeprefix("\\A").removesuffix("\\Z") + "$"
    event = schemas["PaymentEvent"]
    for field in TEXT_FIELDS:
        text = event["properties"][field]
        (text["anyOf"][0] if "anyOf" in text else text)["pattern"] = NO_CONTROL
    event["description"] = "One payment to score. Unknown fields are ignored; no text field holds a control character."
    note = schemas["ControlNote"]["properties"]
    for struct in types:
        schemas[struct.__name__]["examples"] = [EXAMPLES[struct]]
        if struct in noted:
            schemas[struct.__name__]["properties"].update(note)
    nested = {name for name in schemas if name != ControlNote.__name__}  # a body's own structs (an outcome)
    return {name: schemas[name] for name in [*(t.__name__ for t in types), *sorted(nested)]}


REFERS = re.compile('"' + re.escape(answers.REF.format(name="")) + r'(\w+)"')  # a $ref, the name it refers to


def _answered(types: list[Struct]) -> dict[str, Schema]:
    """Each answer's schema as msgspec derives it, with every struct an answer names by `one_of`
    (msgspec does not follow it); each field an answer always writes is required."""
    while True:
        _, schemas = msgspec.json.schema_components(types, ref_template=answers.REF)
        named = set(REFERS.findall(orjson.dumps(schemas).decode())) - set(schemas)
        if not named:
            break
        types = [*types, *(getattr(answers, name) for name in sorted(named))]
    for name, schema in schemas.items():
        written = _always_written(getattr(answers, name))
        if written:
            schema["required"] = written
    return schemas


def _always_written(struct: Struct) -> list[str]:
    """The fields an answer never leaves out: all but `UNSET` ones and, under `omit_defaults`,
    those with a default. (msgspec's schema requires only the fields without a default.)"""
    omits = struct.__struct_config__.omit_defaults
    return [
        f.encode_name
        for f in msgspec.structs.fields(struct)
        if f.required or (not omits and f.default is not msgspec.UNSET)
    ]


# -- the operations: the route table's ------------------------------------------------------


def _paths(max_batch_items: int, routes: tuple[RouteSpec, ...] = ROUTES) -> dict[str, Schema]:
    """Every operation of the route table, in its order; a `{probe}` route's under each probe's path.

    A route without an operation, two operations on one path and method, or an error class that
    is not the error tree's fails here (tests/adapters/http/test_openapi.py builds the document).
    """
    paths: dict[str, Schema] = {}
    for spec in routes:
        if not spec.ops:
            raise LookupError(f"route {spec.name} ({spec.path}) has no operation")
        for op in spec.ops:
            path = spec.path.replace("{probe}", op.probe) if op.probe else spec.path
            if op.method.lower() in paths.setdefault(path, {}):
                raise LookupError(f"route {spec.name}: a second {op.method} {path}")
            paths[path][op.method.lower()] = _operation(spec, op, path, max_batch_items)
    return paths


def _operation(spec: RouteSpec, op: Op, path: str, max_batch_items: int) -> Schema:
    name = op.name or (f"{spec.name}_{op.probe}" if op.probe else spec.name)
    operation: Schema = {"operationId": name, "summary": op.summary, "tags": [spec.tag]}
    if op.description:
        operation["description"] = op.description
    params = [PARAMS[p] for p in re.findall(r"\{(\w+)\}", path)]
    params += [PARAMS["explain"]] if op.answer is answers.Scored else []
    params += [PARAMS["header_length"]] if op.body == "V2InferRequest" else []
    if params:
        operation["parameters"] = params
    if isinstance(op.body, str):
        operation["requestBody"] = _written(op.body, max_batch_items)
    elif op.body is not None:
        required = any(f.required for f in msgspec.structs.fields(op.body))
        schema = {"schema": _ref(op.body.__name__)}
        operation["requestBody"] = {"required": required, "description": TAKEN[op.body],
                                    "content": {"application/json": schema}}  # fmt: skip
    operation["responses"] = {"200": _answer(op.answer, max_batch_items)}
    if op.unready is not None and isinstance(op.answer, type):
        operation["responses"][str(op.unready)] = _json(_ref(op.answer.__name__), UNREADY[op.answer])
    operation["responses"] |= _errors(spec, op, path)
    if spec.auth == "anonymous":
        operation["security"] = []
    else:
        operation["responses"]["401"] = {"description": WHY[401]}
    return operation


def _answer(answer: Struct | Written, max_batch_items: int) -> Schema:
    if isinstance(answer, str):
        return _written(answer, max_batch_items)
    given = _json(_ref(answer.__name__), ANSWERED[answer])
    if answer is answers.V2InferHead:  # the binary-data extension: the JSON head, then the tensors
        length = {"schema": INT, "description": "binary answers only"}
        content = {**given.pop("content"), "application/octet-stream": BYTES}
        given |= {"headers": {"Inference-Header-Content-Length": length}, "content": content}
    return given


def _errors(spec: RouteSpec, op: Op, path: str) -> dict[str, Schema]:
    """Each error status of an operation: `/api` `{"error": one of its codes, "detail": ...}`, V2 `{"error": ...}`."""
    codes: dict[int, list[str]] = {}
    waits: set[int] = set()
    for error in op.errors:
        if getattr(errors, error.__name__, None) is not error:
            raise LookupError(
                f"route {spec.name}: {error.__qualname__} is not a class of the error tree (shared/errors.py)"
            )
        if error.code not in codes.setdefault(error.status, []):
            codes[error.status].append(error.code)
        if error.retry_after_s is not None:
            waits.add(error.status)
    routed = "{" in path or spec.name in SWITCHED_OFF  # the router's 404 (or, switched off, as if it were)
    v2 = path.startswith("/v2")
    responses: dict[str, Schema] = {}
    for status in sorted({*codes, *([404] if routed else [])}):
        found = codes.get(status, []) + ([NOT_FOUND] if status == 404 and routed else [])
        # NOTE: on /v2 the router's own 404 is V2's shape too (app.py `_http_error`: V2 clients read one shape)
        schema = _ref("V2Error") if v2 else {"allOf": [_ref("ErrorBody")], "properties": {"error": {"enum": found}}}
        responses[str(status)] = _json(schema, WHY[status])
        if status in waits:
            responses[str(status)]["headers"] = RETRY_AFTER
    return responses


def document(max_batch_items: int) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the app, with this deployment's limits."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Fraud scoring",
            "version": "1",
            "description": (
                "Payment events scored by ONNX models (`/api/...`), and the Open Inference Protocol V2 "
                "(`/v2/...`) over the same core. The same paths locally (`make run`) and under Azure "
                "Functions; a trailing slash is the same route. Every error is JSON: `/api` "
                '`{"error": code, "detail": message}`, V2 `{"error": message}`. Under the Functions '
                "host every route but the probes takes a function key; locally none is checked."
            ),
        },
        "tags": [{"name": tag} for tag in get_args(Tag)],
        "security": [{"functionKey": []}, {"functionKeyQuery": []}],
        "paths": _paths(max_batch_items),
        "components": {
            "schemas": _components(ROUTES),
            "securitySchemes": {
                "functionKey": {"type": "apiKey", "in": "header", "name": "x-functions-key"},
                "functionKeyQuery": {"type": "apiKey", "in": "query", "name": "code"},
            },
        },
    }


def document_bytes(max_batch_items: int) -> bytes:
    """`document` as the JSON the route serves."""
    return orjson.dumps(document(max_batch_items))


if __name__ == "__main__":  # pragma: no cover - `python -m shared.adapters.http.openapi > openapi.json`
    import sys

    from shared.settings import Settings

    sys.stdout.buffer.write(orjson.dumps(document(Settings.from_env().max_batch_items), option=orjson.OPT_INDENT_2))
