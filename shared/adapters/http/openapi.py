"""The OpenAPI 3.1 document of the HTTP API, served at `GET /api/openapi.json`.

Built in code, once per app, on the first request for it: never on the Functions import
path, never on the fast path. Built rather than kept as a file so that it cannot drift:

- the request bodies of `/api/...` are the decoders' own types (msgspec's JSON Schema of
  `PaymentEvent` and `Activation`, patterns made ECMA-262), so what the document says is
  accepted is what is decoded;
- the response bodies are the answers' own types (shared/domain/answers.py, whose structs the
  adapters encode), so what the document says is answered is what is written; the V2
  inference request, read by hand, is the one body written here;
- the limits are this deployment's settings (MAX_BATCH_ITEMS);
- each route's error answers name their status and the codes it may carry (`_api_errors`).

Two error shapes, as the app answers: `/api/...` `{"error": code, "detail": message}`
(`ErrorBody`, codes from shared/errors.py), V2 `{"error": message}` (the protocol's). tests/adapters/http/test_openapi.py holds the
document to the routes the app serves (Starlette's and the Functions host's) and to real
answers; `make fuzz` sends schemathesis at it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
import orjson

from shared.adapters.http.routes import ROUTES, RouteSpec
from shared.domain import answers
from shared.domain.control import ControlNote
from shared.domain.events import EXAMPLE_EVENT, TEXT_FIELDS, Activation, CanarySplit, PaymentEvent

__all__ = ["OPENAPI_PATH", "document", "document_bytes"]

OPENAPI_PATH = "/api/openapi.json"
Schema = dict[str, Any]

STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
NO_CONTROL = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"  # shared/domain/events.py: no text field admits one


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _array(items: Schema, **limits: int) -> Schema:
    return {"type": "array", "items": items, **limits}


def _object(
    required: Mapping[str, Schema], optional: Mapping[str, Schema] | None = None, *, closed: bool = True
) -> Schema:
    """An object with these `required` and `optional` properties; `closed`: no others."""
    schema: Schema = {"type": "object", "properties": {**required, **(optional or {})}, "required": list(required)}
    if closed:
        schema["additionalProperties"] = False
    return schema


# -- request bodies: the decoders' own schemas -------------------------------------------


EVENT = EXAMPLE_EVENT
# the demo model's 25 columns (`parameters.features` of GET /v2/models/fraud), two rows
ROWS = [
    [4.8, 3, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 60, 2, 400, 0, 1],
    [3.2, 14, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 45, 1, 900, 0, 1],
]


def _decoded() -> dict[str, Schema]:
    """`PaymentEvent`, `Activation` and `CanarySplit` as msgspec decodes them, patterns written for any validator."""
    _, schemas = msgspec.json.schema_components(
        [PaymentEvent, Activation, CanarySplit, ControlNote], ref_template="#/components/schemas/{name}"
    )
    for schema in schemas.values():
        for prop in schema["properties"].values():
            if "pattern" in prop:  # NOTE: Python's \A ... \Z is ECMA-262's ^ ... $ (no multiline flag)
                prop["pattern"] = "^" + prop["pattern"].removeprefix("\\A").removesuffix("\\Z") + "$"
    event = schemas["PaymentEvent"]
    for field in TEXT_FIELDS:
        text = event["properties"][field]
        (text["anyOf"][0] if "anyOf" in text else text)["pattern"] = NO_CONTROL
    event["description"] = "One payment to score. Unknown fields are ignored; no text field holds a control character."
    event["examples"] = [EVENT]
    schemas["Activation"]["examples"] = [{"version": "1"}]
    schemas["CanarySplit"]["examples"] = [{"version": "2", "weight": 0.1}]
    note = schemas.pop("ControlNote")["properties"]["reason"]  # NOTE: why, audited (shared/domain/control.py)
    for action in ("Activation", "CanarySplit"):
        schemas[action]["properties"]["reason"] = note
    return schemas


# -- the V2 inference request: read by hand (shared/adapters/oip/rest.py), so written here ----------

DATATYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64"]
DATA: Schema = {
    "description": "flat or nested (row-major) elements: numbers, booleans or strings (BYTES)",
    "type": "array",
    "items": {"type": ["number", "boolean", "string", "array"]},
}
PARAMETERS: Schema = {"type": "object"}
INFER_REQUEST = _object(
    {
        "inputs": _array(
            _object(
                {"name": STR, "datatype": {"enum": [*DATATYPES, "BYTES"]}, "shape": _array(INT)},
                {"data": DATA, "parameters": PARAMETERS},
                closed=False,
            )
        )
    },
    {
        "id": STR,
        "parameters": PARAMETERS,
        "outputs": _array(_object({"name": STR}, {"parameters": PARAMETERS}, closed=False)),
    },
    closed=False,
)
INFER_REQUEST["examples"] = [
    {"id": "r1", "inputs": [{"name": "features", "datatype": "FP32", "shape": [2, 25], "data": ROWS}]}
]

# -- response bodies: the answers' own types (shared/domain/answers.py) ---------------------------

ANSWERS: tuple[type[msgspec.Struct], ...] = (
    answers.Scored,
    answers.Batch,
    answers.IndexedError,  # NOTE: named by `one_of`, which msgspec does not follow: listed here
    answers.ModelList,
    answers.ModelView,
    answers.EnsembleView,
    answers.ReviewRecord,
    answers.RolloutView,
    answers.Stats,
    answers.Readiness,
    answers.Liveness,
    answers.ErrorBody,
    answers.V2ServerMetadata,
    answers.V2Live,
    answers.V2Ready,
    answers.V2ModelReady,
    answers.V2ModelMetadata,
    answers.V2InferHead,
    answers.V2Error,
)


def _answered() -> dict[str, Schema]:
    """Each answer's schema as msgspec derives it, every field it always writes required."""
    _, schemas = msgspec.json.schema_components(ANSWERS, ref_template=answers.REF)
    for name, schema in schemas.items():
        written = _always_written(getattr(answers, name))
        if written:
            schema["required"] = written
    return schemas


def _always_written(struct: type[msgspec.Struct]) -> list[str]:
    """The fields an answer never leaves out: all but `UNSET` ones and, under `omit_defaults`,
    those with a default. (msgspec's schema requires only the fields without a default.)"""
    omits = struct.__struct_config__.omit_defaults
    return [
        f.encode_name
        for f in msgspec.structs.fields(struct)
        if f.required or (not omits and f.default is not msgspec.UNSET)
    ]


# -- responses ------------------------------------------------------------------------

WHY = {
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
JSON_BODY = {400: ["malformed_json", "bad_request"], 408: ["body_timeout"], 413: ["payload_too_large"]}
JSON_BODY |= {415: ["unsupported_media_type"]}
UNREADY = ["not_ready", "model_source"]
SHED = ["overloaded", "deadline_exceeded"]  # shared/runtime/admission.py: answered with Retry-After
SCORING = {**JSON_BODY, 500: ["inference_failed", "batch_shape"], 503: [*UNREADY, "model_retired", *SHED]}


def _json(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _api_errors(codes: Mapping[int, Iterable[str]]) -> dict[str, Schema]:
    """The `/api` error answers: status → `{"error": one of codes, "detail": message}`."""
    responses: dict[str, Schema] = {}
    for status, names in sorted(codes.items()):
        schema = {"allOf": [_ref("ErrorBody")], "properties": {"error": {"enum": list(names)}}}
        responses[str(status)] = _json(schema, WHY[status])
        if status == 503 and set(SHED) & set(names):
            responses[str(status)]["headers"] = RETRY_AFTER
    return responses


def _v2_errors(*statuses: int) -> dict[str, Schema]:
    """The V2 error answers: `{"error": message}`; a 404 for a path that no route matches is
    the router's, in the /api shape (`ErrorBody`)."""
    responses = {str(status): _json(_ref("V2Error"), WHY[status]) for status in sorted(statuses)}
    if "404" in responses:
        responses["404"] = _json({"anyOf": [_ref("V2Error"), _ref("ErrorBody")]}, WHY[404])
    if "503" in responses:  # NOTE: V2 infer is admitted like every scoring route (the others never shed)
        responses["503"]["headers"] = RETRY_AFTER
    return responses


def _operation(
    operation_id: str,
    summary: str,
    tag: str,
    responses: Mapping[str, Schema],
    *,
    body: Schema | None = None,
    params: Iterable[str] = (),
    description: str = "",
) -> Schema:
    operation: Schema = {"operationId": operation_id, "summary": summary, "tags": [tag]}
    if description:
        operation["description"] = description
    if params:
        operation["parameters"] = [_PARAMS[p] for p in params]
    if body is not None:
        operation["requestBody"] = body
    operation["responses"] = dict(responses)
    return operation


_PARAMS: dict[str, Schema] = {
    "name": {
        "name": "name",
        "in": "path",
        "required": True,
        "schema": STR,
        "example": "fraud",
        "description": "a model or ensemble",
    },
    "version": {
        "name": "version",
        "in": "path",
        "required": True,
        "schema": STR,
        "example": "1",
        "description": "a loaded version",
    },
    "event_id": {"name": "event_id", "in": "path", "required": True, "schema": STR, "example": "evt-1001"},
    "explain": {
        "name": "explain",
        "in": "query",
        "required": False,
        "schema": {"enum": ["1", "true", "0", "false"]},
        "description": "1: a review or decline answer names the features behind its score (`reasons`; "
        "occlusion, within EXPLAIN_BUDGET_MS)",
    },
    "header_length": {
        "name": "Inference-Header-Content-Length",
        "in": "header",
        "required": False,
        "schema": {"type": "integer", "minimum": 0},
        "description": "binary-data extension: the length of the JSON header that starts the body",
    },
}


def _json_body(schema: Schema, description: str) -> Schema:
    return {"required": True, "description": description, "content": {"application/json": {"schema": schema}}}


# -- the paths ------------------------------------------------------------------------


def _api(max_batch_items: int) -> dict[str, Schema]:
    event = _json_body(_ref("PaymentEvent"), "one payment event (at most MAX_BODY_BYTES)")
    envelope = _object({"events": _array(_ref("PaymentEvent"), minItems=1, maxItems=max_batch_items)}, closed=False)
    envelope["examples"] = [{"events": [EVENT, {**EVENT, "event_id": "evt-1002", "amount": 12.5}]}]
    batch = _json_body(
        envelope, "events scored in order; an item that is not a valid event gets its own error in its slot"
    )
    activation = _json_body(_ref("Activation"), "the version to pin (at most 1 KiB)")
    scored = _json(_ref("Scored"), "the risk score and the decision")
    model = _json(_ref("ModelView"), "the model as it serves now")
    rollout = _json(_ref("RolloutView"), "the model's rollout as it is now")
    kept = {404: ["model_not_found", "not_found"], 503: [*UNREADY, "control_store_down"]}
    changes = {
        **JSON_BODY,
        **kept,
        409: ["rollout_conflict"],
        422: ["invalid_event", "model_invalid"],
    }
    unready = _api_errors({503: UNREADY})
    return {
        "/api/score": {
            "post": _operation(
                "score",
                "Score one payment event with the default model",
                "scoring",
                {"200": scored, **_api_errors({**SCORING, 422: ["invalid_event"]})},
                body=event,
                params=["explain"],
            )
        },
        "/api/score/batch": {
            "post": _operation(
                "score_batch",
                "Score several events, answered in order",
                "scoring",
                {
                    "200": _json(_ref("Batch"), "one answer per event, in order"),
                    **_api_errors({**SCORING, 422: ["invalid_event", "too_many_items"]}),
                },
                body=batch,
            )
        },
        "/api/models": {
            "get": _operation(
                "models",
                "Loaded models, their versions, pins and last rejected version; ensembles",
                "models",
                {
                    "200": _json(_ref("ModelList"), "every served name"),
                    **unready,
                },
            )
        },
        "/api/models/{name}/score": {
            "post": _operation(
                "model_score",
                "Score one payment event with a named model or ensemble",
                "scoring",
                {
                    "200": scored,
                    **_api_errors({**SCORING, 404: ["model_not_found", "not_found"], 422: ["invalid_event"]}),
                },
                body=event,
                params=["name", "explain"],
            )
        },
        "/api/models/{name}/activate": {
            "post": _operation(
                "model_activate",
                "Pin a version on every replica (rollback); uploads no longer change what serves",
                "models",
                {
                    "200": model,
                    **_api_errors(
                        {
                            **JSON_BODY,
                            404: ["model_not_found", "not_found"],
                            422: ["invalid_event", "model_invalid"],
                            503: [*UNREADY, "control_store_down"],
                        }
                    ),
                },
                body=activation,
                params=["name"],
            ),
            "delete": _operation(
                "model_release",
                "Release the pin: the newest version serves again, everywhere",
                "models",
                {
                    "200": model,
                    **_api_errors({404: ["model_not_found", "not_found"], 503: [*UNREADY, "control_store_down"]}),
                },
                params=["name"],
            ),
        },
        "/api/models/{name}/rollout": {
            "get": _operation(
                "model_rollout",
                "What serves a model on this replica: its pin, shadow, canary split, last abort and drift",
                "rollouts",
                {"200": rollout, **_api_errors({404: ["model_not_found", "not_found"], 503: UNREADY})},
                params=["name"],
            )
        },
        "/api/models/{name}/shadow": {
            "put": _operation(
                "model_shadow",
                "Score every event with a second version too, after its answer (fleet-wide)",
                "rollouts",
                {"200": rollout, **_api_errors(changes)},
                body=_json_body(_ref("Activation"), "the shadow version (at most 1 KiB)"),
                params=["name"],
            ),
            "delete": _operation(
                "model_shadow_remove",
                "No shadow version any more (fleet-wide)",
                "rollouts",
                {"200": rollout, **_api_errors(kept)},
                params=["name"],
            ),
        },
        "/api/models/{name}/canary": {
            "put": _operation(
                "model_canary",
                "Route a share of users (by a hash of user_id: sticky) to a candidate version (fleet-wide)",
                "rollouts",
                {"200": rollout, **_api_errors(changes)},
                body=_json_body(_ref("CanarySplit"), "the candidate and the share of users it scores (at most 1 KiB)"),
                params=["name"],
                description="409 `rollout_conflict` when the candidate is the version that serves: pin the live "
                "version first (POST /api/models/{name}/activate), so that an upload does not replace it. "
                "The split aborts by itself when the candidate's decline share or error rate departs from the "
                "live version's by more than CANARY_MAX_DECLINE_DELTA / CANARY_MAX_ERROR_DELTA.",
            ),
            "delete": _operation(
                "model_canary_abort",
                "Abort the split: every user back to the live version (the abort is kept and shown)",
                "rollouts",
                {"200": rollout, **_api_errors({**kept, 409: ["rollout_conflict"]})},
                params=["name"],
            ),
        },
        "/api/models/{name}/canary/promote": {
            "post": _operation(
                "model_promote",
                "The candidate becomes the pinned version on every replica; the split ends",
                "rollouts",
                {"200": rollout, **_api_errors({**kept, 409: ["rollout_conflict"]})},
                params=["name"],
            )
        },
        "/api/reviews/{event_id}": {
            "get": _operation(
                "reviews",
                "The review of an event by Azure OpenAI",
                "reviews",
                {
                    "200": _json(_ref("ReviewRecord"), "the kept review: done, pending or failed"),
                    **_api_errors({404: ["review_not_found", "not_found"], 503: UNREADY}),
                },
                params=["event_id"],
            )
        },
        "/api/stats": {
            "get": _operation(
                "stats",
                "Events scored, cache hits and misses per tier, Redis round-trips and errors",
                "operations",
                {"200": _json(_ref("Stats"), "the counters of this replica"), **unready},
            )
        },
        "/api/metrics": {
            "get": _operation(
                "metrics",
                "Every metric, in the Prometheus text format",
                "operations",
                {
                    "200": {
                        "description": "Prometheus text exposition format 0.0.4",
                        "content": {"text/plain": {"schema": STR}},
                    },
                    **_api_errors({404: ["not_found"], 503: ["not_ready"]}),
                },
                description="404 `not_found` when TELEMETRY=false.",
            )
        },
        "/api/health/live": {
            "get": _operation(
                "health_live",
                "Liveness: 200 while the process answers",
                "health",
                {"200": _json(_ref("Liveness"), "the process answers")},
            )
        },
        "/api/health/ready": {
            "get": _operation(
                "health_ready",
                "Readiness: 200 once every model is loaded and warmed, else 503 with the reason",
                "health",
                {
                    "200": _json(_ref("Readiness"), "ready; `degraded` lists what serves with less than it should"),
                    "503": _json(_ref("Readiness"), "not ready; `detail` says why"),
                },
            )
        },
        OPENAPI_PATH: {
            "get": _operation(
                "openapi",
                "This document",
                "operations",
                {
                    "200": _json(_object({"openapi": STR, "info": {"type": "object"}}, closed=False), "OpenAPI 3.1"),
                    **_api_errors({503: ["not_ready"]}),
                },
            )
        },
    }


def _v2() -> dict[str, Schema]:
    metadata = _json(_ref("V2ModelMetadata"), "the model's versions, platform, tensors and input columns")
    ready = _ref("V2ModelReady")
    infer_body = {
        "required": True,
        "description": "JSON, or JSON then binary tensors (binary-data extension; "
        "Inference-Header-Content-Length says where the JSON ends). Any content-type is read so.",
        "content": {
            "application/json": {"schema": _ref("V2InferRequest")},
            "application/octet-stream": {},  # NOTE: OpenAPI 3.1 for bytes of any form: no schema
        },
    }
    inferred = {
        "description": "one score per row: JSON, or binary outputs when asked (`binary_data_output`)",
        "headers": {"Inference-Header-Content-Length": {"schema": INT, "description": "binary answers only"}},
        "content": {
            "application/json": {"schema": _ref("V2InferHead")},
            "application/octet-stream": {},  # NOTE: OpenAPI 3.1 for bytes of any form: no schema
        },
    }

    def model_ready(operation_id: str, params: list[str]) -> Schema:
        return _operation(
            operation_id,
            "Whether the model (version) serves now",
            "v2",
            {
                "200": _json(ready, "it serves"),
                "400": _json(ready, "it does not serve (the protocol's 4xx)"),
                **_v2_errors(404, 503),
            },
            params=params,
        )

    def infer(operation_id: str, params: list[str]) -> Schema:
        return _operation(
            operation_id,
            "Inference: rows of features in, one score per row out",
            "v2",
            {"200": inferred, **_v2_errors(400, 404, 408, 413, 500, 503)},
            body=infer_body,
            params=[*params, "header_length"],
        )

    model, versioned = "/v2/models/{name}", "/v2/models/{name}/versions/{version}"
    return {
        "/v2": {
            "get": _operation(
                "v2_server",
                "Server metadata",
                "v2",
                {
                    "200": _json(_ref("V2ServerMetadata"), "the server"),
                    **_v2_errors(503),
                },
            )
        },
        "/v2/health/live": {
            "get": _operation("v2_health_live", "Server liveness", "v2", {"200": _json(_ref("V2Live"), "live")})
        },
        "/v2/health/ready": {
            "get": _operation(
                "v2_health_ready",
                "Server readiness",
                "v2",
                {
                    "200": _json(_ref("V2Ready"), "ready"),
                    "400": _json(_ref("V2Ready"), "not ready (the protocol's 4xx)"),
                    **_v2_errors(503),
                },
            )
        },
        model: {
            "get": _operation(
                "v2_model", "Model metadata", "v2", {"200": metadata, **_v2_errors(404, 503)}, params=["name"]
            )
        },
        model + "/ready": {"get": model_ready("v2_model_ready", ["name"])},
        model + "/infer": {"post": infer("v2_model_infer", ["name"])},
        versioned: {
            "get": _operation(
                "v2_version",
                "Model metadata of a loaded version",
                "v2",
                {"200": metadata, **_v2_errors(404, 503)},
                params=["name", "version"],
            )
        },
        versioned + "/ready": {"get": model_ready("v2_version_ready", ["name", "version"])},
        versioned + "/infer": {"post": infer("v2_version_infer", ["name", "version"])},
    }


def _paths(max_batch_items: int, routes: tuple[RouteSpec, ...] = ROUTES) -> dict[str, Schema]:
    """The operations written above, in the route table's order, each with its auth from the table.

    A route the document does not describe, or a documented path or method the table lacks,
    fails here (tests/adapters/http/test_openapi.py builds the document on every run).
    """
    written = {**_api(max_batch_items), **_v2()}
    paths: dict[str, Schema] = {}
    for spec in routes:
        for path in _document_paths(spec.path):
            operations = written.pop(path, None)
            if operations is None:
                raise LookupError(f"route {spec.name} ({path}) is in the route table but not in the document")
            if sorted(m.upper() for m in operations) != sorted(spec.methods):
                raise LookupError(f"route {spec.name}: the document has {sorted(operations)}, the table {spec.methods}")
            for operation in operations.values():
                if spec.auth == "anonymous":
                    operation["security"] = []
                else:
                    operation["responses"]["401"] = {"description": WHY[401]}
            paths[path] = operations
    if written:
        raise LookupError(f"documented but not in the route table: {sorted(written)}")
    return paths


def _document_paths(path: str) -> list[str]:
    """A route's paths in the document: a `{probe}` route is its two probes, each with its own answers."""
    return [path.replace("{probe}", p) for p in PROBES] if "{probe}" in path else [path]


PROBES = ("live", "ready")


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
        "tags": [{"name": t} for t in ("scoring", "models", "rollouts", "reviews", "operations", "health", "v2")],
        "security": [{"functionKey": []}, {"functionKeyQuery": []}],
        "paths": _paths(max_batch_items),
        "components": {
            "schemas": {**_decoded(), "V2InferRequest": INFER_REQUEST, **_answered()},
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
