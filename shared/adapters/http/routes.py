"""The one route table of the HTTP API: every router, allowlist and document derives from it.

    name     the Azure Functions function that declares it (function_app.py; a test holds the two equal)
    path     the same path locally and under the host (host.json's routePrefix is "")
    auth     the Functions auth level: "function" (any host or function key: what scoring clients
             get), "admin" (the master key only: the control routes, which change what the fleet
             serves or show who changed it) or "anonymous" (the platform's probes)
    plane    "data": scoring work, which takes the core's admission; "admin": everything else
    tag      the group its operations are listed under in the OpenAPI document
    ops      one `Op` per method (a `{probe}` route: one per probe): its summary, the type of its
             answer and of its body, and the error classes it may answer with (their status and
             code are shared/errors.py's, written nowhere else); its methods are its ops'

Derived from it: the Starlette routes (shared/adapters/http/app.py, in this order: Starlette
tries them in order, so the hot routes come first), the routes the Functions adapter frames
itself (`framed`), the OpenAPI operations (shared/adapters/http/openapi.py) and the check of
function_app.py's declarations (tests/adapters/test_function_app.py).
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

import msgspec

from shared.domain.answers import (
    Batch,
    Liveness,
    ModelList,
    ModelView,
    OutcomeReceipt,
    Readiness,
    ReviewRecord,
    RolloutView,
    Scored,
    Stats,
    V2InferHead,
    V2Live,
    V2ModelMetadata,
    V2ModelReady,
    V2Ready,
    V2ServerMetadata,
)
from shared.domain.control import ControlNote
from shared.domain.events import Activation, CanarySplit, PaymentEvent
from shared.domain.outcomes import OutcomeBatch
from shared.errors import (
    BadRequest,
    BatcherClosed,
    BatchShapeError,
    BodyTimeout,
    ControlStoreDown,
    DeadlineExceeded,
    EventExpired,
    InferenceFailed,
    InvalidEvent,
    MalformedJson,
    ModelInvalid,
    ModelNotFound,
    ModelSourceError,
    NotReady,
    Overloaded,
    PayloadTooLarge,
    ReviewNotFound,
    RolloutConflict,
    ScoringError,
    SettingsError,
    TooManyItems,
    Unavailable,
    UnsupportedMediaType,
)

__all__ = ["ROUTES", "Auth", "Op", "RouteSpec", "Tag", "Written", "framed", "route"]

Auth = Literal["function", "admin", "anonymous"]
# in the document's order
Tag = Literal["scoring", "models", "rollouts", "reviews", "outcomes", "operations", "health", "v2"]
Written = Literal["EventBatch", "V2InferRequest", "PrometheusText", "OpenAPI"]
"""A body or answer that no type describes (read or written by hand): openapi.py writes its schema."""


class Op(NamedTuple):
    """One operation of a route: what it takes, answers and may refuse with."""

    method: str
    summary: str
    answer: type[msgspec.Struct] | Written  # the 200 answer
    body: type[msgspec.Struct] | Written | None = None  # a body whose type has no required field is optional
    errors: tuple[type[ScoringError], ...] = ()
    name: str = ""  # its operationId, where not the route's name (a second method)
    probe: str = ""  # a `{probe}` route's probe (operationId: name_probe)
    unready: int | None = None  # the status of the same answer while not ready
    description: str = ""


class RouteSpec(NamedTuple):
    name: str
    path: str
    auth: Auth
    plane: Literal["data", "admin"]
    tag: Tag
    ops: tuple[Op, ...]

    @property
    def methods(self) -> tuple[str, ...]:
        """What it answers (another method is a JSON 405)."""
        return tuple(dict.fromkeys(op.method for op in self.ops))

    @property
    def functions_route(self) -> str:
        """The `route=` of its HTTP trigger (no leading slash)."""
        return self.path.lstrip("/")


UNREADY = (NotReady, ModelSourceError)  # no service yet, or none can be built
BODY = (MalformedJson, BadRequest, BodyTimeout, PayloadTooLarge)  # a body read within its cap and BODY_TIMEOUT_MS
JSON_BODY = (*BODY, UnsupportedMediaType)  # ... sent as application/json
SCORING = (InferenceFailed, BatchShapeError, *UNREADY, BatcherClosed, Overloaded, DeadlineExceeded)
CHANGE = (*JSON_BODY, ModelNotFound, InvalidEvent, *UNREADY, ControlStoreDown)  # a control action, kept fleet-wide
ROLLOUT = (*CHANGE, RolloutConflict)


def _data(name: str, path: str, tag: Tag, op: Op) -> RouteSpec:
    return RouteSpec(name, path, "function", "data", tag, (op,))


def _admin(name: str, path: str, tag: Tag, *ops: Op, auth: Auth = "function") -> RouteSpec:
    return RouteSpec(name, path, auth, "admin", tag, ops)


def _control(name: str, path: str, tag: Tag, *ops: Op) -> RouteSpec:
    """A control route: the master key (AuthLevel.ADMIN), never a scoring key (docs/deploy.md)."""
    return _admin(name, path, tag, *ops, auth="admin")


def _get(
    summary: str,
    answer: type[msgspec.Struct] | Written,
    *errors: type[ScoringError],
    probe: str = "",
    unready: int | None = None,
    description: str = "",
) -> Op:
    return Op("GET", summary, answer, None, errors, probe=probe, unready=unready, description=description)


CANARY = (
    "409 `rollout_conflict` when the candidate is the version that serves: pin the live version first "
    "(POST /api/models/{name}/activate), so that an upload does not replace it. The split aborts by itself "
    "when the candidate's decline share or error rate departs from the live version's by more than "
    "CANARY_MAX_DECLINE_DELTA / CANARY_MAX_ERROR_DELTA."
)

OUTCOMES = (
    "Each outcome is written, a duplicate (the same content restated: nothing written) or refused in "
    "`errors` with its slot and code: 422 `invalid_event` (a malformed field, a source not declared, a "
    "`learned_at` in the future), 422 `event_expired` (learned past the log's retention). "
    "written + duplicates + refused is the batch's size. An outcome for an event id the log does not "
    "hold is written, and counted unmatched by the report until its decision is found. 503 "
    "`unavailable`: the store did not take the batch (nothing was marked taken: send it again). 404 "
    "`not_found` when PREDICTION_LOG=off (there is nowhere to keep them)."
)


V2_INFER = Op(
    "POST",
    "Inference: rows of features in, one score per row out",
    V2InferHead,
    "V2InferRequest",
    (*BODY, ModelNotFound, *SCORING),
)
V2_READY = _get("Whether the model (version) serves now", V2ModelReady, *UNREADY, unready=400)

# fmt: off
ROUTES: tuple[RouteSpec, ...] = (
    _data("score", "/api/score", "scoring",
        Op("POST", "Score one payment event with the default model",
           Scored, PaymentEvent, (*JSON_BODY, InvalidEvent, *SCORING))),
    _data("v2_model_infer", "/v2/models/{name}/infer", "v2", V2_INFER),
    _data("v2_version_infer", "/v2/models/{name}/versions/{version}/infer", "v2", V2_INFER),
    _data("score_batch", "/api/score/batch", "scoring",
        Op("POST", "Score several events, answered in order",
           Batch, "EventBatch", (*JSON_BODY, InvalidEvent, TooManyItems, *SCORING))),
    _data("model_score", "/api/models/{name}/score", "scoring",
        Op("POST", "Score one payment event with a named model or ensemble",
           Scored, PaymentEvent, (*JSON_BODY, ModelNotFound, InvalidEvent, *SCORING))),
    _admin("models", "/api/models", "models",
        _get("Loaded models, their versions, pins and last rejected version; ensembles", ModelList, *UNREADY)),
    _control("model_activate", "/api/models/{name}/activate", "models",
        Op("POST", "Pin a version on every replica (rollback); uploads no longer change what serves",
           ModelView, Activation, (*CHANGE, ModelInvalid)),
        Op("DELETE", "Release the pin: the newest version serves again, everywhere",
           ModelView, ControlNote, CHANGE, name="model_release")),
    _control("model_rollout", "/api/models/{name}/rollout", "rollouts",
        _get("What serves a model on this replica: its pin, shadow, canary split, last abort and drift",
             RolloutView, ModelNotFound, *UNREADY)),
    _control("model_shadow", "/api/models/{name}/shadow", "rollouts",
        Op("PUT", "Score every event with a second version too, after its answer (fleet-wide)",
           RolloutView, Activation, (*ROLLOUT, ModelInvalid)),
        Op("DELETE", "No shadow version any more (fleet-wide)",
           RolloutView, ControlNote, CHANGE, name="model_shadow_remove")),
    _control("model_canary", "/api/models/{name}/canary", "rollouts",
        Op("PUT", "Route a share of users (by a hash of user_id: sticky) to a candidate version (fleet-wide)",
           RolloutView, CanarySplit, (*ROLLOUT, ModelInvalid), description=CANARY),
        Op("DELETE", "Abort the split: every user back to the live version (the abort is kept and shown)",
           RolloutView, ControlNote, ROLLOUT, name="model_canary_abort")),
    _control("model_promote", "/api/models/{name}/canary/promote", "rollouts",
        Op("POST", "The candidate becomes the pinned version on every replica; the split ends",
           RolloutView, ControlNote, ROLLOUT)),
    _control("reviews", "/api/reviews/{event_id}", "reviews",
        _get("The review of an event by Azure OpenAI", ReviewRecord, ReviewNotFound, *UNREADY)),
    _control("outcomes", "/api/outcomes", "outcomes",
        Op("POST", "Outcomes learned later (chargebacks, reviews, customers), kept beside the decisions",
           OutcomeReceipt, OutcomeBatch,
           (*JSON_BODY, InvalidEvent, EventExpired, TooManyItems, Unavailable, SettingsError),
           description=OUTCOMES)),
    _admin("stats", "/api/stats", "operations",
        _get("Events scored, cache hits and misses per tier, Redis round-trips and errors", Stats, *UNREADY)),
    _admin("metrics", "/api/metrics", "operations",
        _get("Every metric, in the Prometheus text format", "PrometheusText", SettingsError,
             description="404 `not_found` when TELEMETRY=false.")),
    _admin("health", "/api/health/{probe}", "health",
        _get("Liveness: 200 while the process answers", Liveness, probe="live"),
        _get("Readiness: 200 once every model is loaded and warmed, else 503 with the reason", Readiness,
             probe="ready", unready=503),
        auth="anonymous"),
    _admin("v2_server", "/v2", "v2", _get("Server metadata", V2ServerMetadata, *UNREADY)),
    _admin("v2_health", "/v2/health/{probe}", "v2",
        _get("Server liveness", V2Live, probe="live"),
        _get("Server readiness: 400 `{\"ready\": false}` while not ready, none loading included", V2Ready,
             probe="ready", unready=400)),
    _admin("v2_model", "/v2/models/{name}", "v2",
        _get("Model metadata", V2ModelMetadata, ModelNotFound, *UNREADY)),
    _admin("v2_version", "/v2/models/{name}/versions/{version}", "v2",
        _get("Model metadata of a loaded version", V2ModelMetadata, ModelNotFound, *UNREADY)),
    _admin("v2_model_ready", "/v2/models/{name}/ready", "v2", V2_READY),
    _admin("v2_version_ready", "/v2/models/{name}/versions/{version}/ready", "v2", V2_READY),
    _admin("openapi", "/api/openapi.json", "operations", _get("This document", "OpenAPI", SettingsError)),
)
# fmt: on


def route(name: str) -> RouteSpec:
    """The route named `name` (a KeyError names a route the table lacks)."""
    return _BY_NAME[name]


_BY_NAME = {r.name: r for r in ROUTES}


def framed(routes: tuple[RouteSpec, ...] = ROUTES) -> re.Pattern[str]:
    """The URLs, as the Functions host hands them, of the data-plane routes the adapter frames itself.

    A path parameter takes a name without percent-escapes (`[A-Za-z0-9._-]+`); anything else goes
    through the general bridge, which decodes it. Group 1 is the path, group 2 the query.
    """
    paths = [
        re.sub(r"\{[a-z_]+\}", "[A-Za-z0-9._-]+", re.escape(r.path).replace(r"\{", "{").replace(r"\}", "}"))
        for r in routes
        if r.plane == "data"
    ]
    return re.compile(r"\A[a-z]+://[^/]*((?:" + "|".join(paths) + r")/?)(?:\?([^#]*))?\Z")
