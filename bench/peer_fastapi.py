"""The alternative: what a user would hand-write instead of this service (FastAPI + ONNX Runtime).

    uvicorn --loop uvloop --http httptools bench.peer_fastapi:app    (bench/run.py starts it)

One `POST /api/score` on FastAPI with a pydantic model of the payment event (the fields and
limits of shared/domain/events.py's PaymentEvent); per request: one Redis GET of the user's
features (the layout the bench seeds: `{REDIS_KEY_PREFIX}user:{user_id}`, a marker byte, then
raw or LZ4-block JSON), the feature row built in plain Python from the model's own metadata
(`serving.features`: event numbers, `field=value` indicators, the user's values or their
defaults), one ONNX Runtime session run on that row, the model's thresholds, a JSON answer.

It imports nothing from `shared`: it stands for code written without this service. What it does
not do (and the service does): no prediction cache (the same event is scored again), no
micro-batching, no feature L1, no `defaulted`/`timings_ms` in the answer, no control-character
or UTC-instant checks beyond pydantic's, no admission control, no telemetry. Its session has
the service's options (1 intra-op and 1 inter-op thread, no spinning), so the model run costs
the same in both. Configured like the app: REDIS_URL, REDIS_KEY_PREFIX, and PEER_MODEL_PATH.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC
from pathlib import Path
from typing import Annotated, Any, Literal

import lz4.block
import numpy as np
import onnxruntime as ort
import orjson
from fastapi import FastAPI
from pydantic import AwareDatetime, BaseModel, Field
from redis.asyncio import Redis

Id = Annotated[str, Field(min_length=1, max_length=128)]


class PaymentEvent(BaseModel):
    """One payment to score: the fields and limits of the service's own event."""

    event_id: Id
    user_id: Id
    amount: Annotated[float, Field(ge=0, le=1e12)]
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")]
    merchant_id: Id
    merchant_category: Annotated[str, Field(min_length=1, max_length=64)]
    country: Annotated[str, Field(pattern=r"^[A-Z]{2}$")]
    channel: Literal["web", "app", "pos"]
    timestamp: AwareDatetime
    note: Annotated[str | None, Field(max_length=1000)] = None


class Scored(BaseModel):
    event_id: str
    risk_score: float
    decision: Literal["approve", "review", "decline"]
    model_version: str


EVENT_FEATURES: dict[str, Callable[[PaymentEvent], float]] = {
    "amount": lambda e: e.amount,
    "log_amount": lambda e: math.log1p(e.amount),
    "hour": lambda e: float(e.timestamp.astimezone(UTC).hour),
    "weekday": lambda e: float(e.timestamp.astimezone(UTC).weekday()),
    "has_note": lambda e: 1.0 if e.note else 0.0,
    "note_length": lambda e: float(len(e.note or "")),
}


class Model:
    """The session and what its metadata says: columns, input, score output, thresholds."""

    def __init__(self, path: str) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.version = Path(path).parent.name  # models/{name}/{version}/model.onnx
        meta = self.session.get_modelmeta().custom_metadata_map
        self.columns = [(f["name"], float(f.get("default", 0.0))) for f in json.loads(meta["serving.features"])]
        self.input = meta.get("serving.input") or self.session.get_inputs()[0].name
        self.output = meta.get("serving.score_output") or self.session.get_outputs()[-1].name
        self.score_column = int(meta.get("serving.score_column", "1"))
        thresholds = json.loads(meta["serving.thresholds"])
        self.review, self.decline = float(thresholds["review"]), float(thresholds["decline"])

    def row(self, event: PaymentEvent, user: dict[str, Any]) -> np.ndarray[Any, np.dtype[np.float32]]:
        values = []
        for name, default in self.columns:
            if name in EVENT_FEATURES:
                values.append(EVENT_FEATURES[name](event))
            elif "=" in name:
                field, expected = name.split("=", 1)
                values.append(1.0 if getattr(event, field) == expected else 0.0)
            else:
                values.append(float(user.get(name, default)))
        return np.array([values], dtype=np.float32)

    def score(self, row: np.ndarray[Any, np.dtype[np.float32]]) -> float:
        return float(self.session.run([self.output], {self.input: row})[0][0, self.score_column])

    def decide(self, score: float) -> Literal["approve", "review", "decline"]:
        if score >= self.decline:
            return "decline"
        return "review" if score >= self.review else "approve"


def user_features(value: bytes | None) -> dict[str, Any]:
    """The seeded layout: b"\\x00" + JSON, or b"\\x01" + an LZ4 block (size-prefixed) of JSON."""
    if not value:
        return {}
    body = value[1:] if value[:1] == b"\x00" else lz4.block.decompress(value[1:])
    features = orjson.loads(body)
    return features if isinstance(features, dict) else {}


state: dict[str, Any] = {}


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    # NOTE: configuration from the environment, as a hand-written service reads it (not shared.settings)
    state["model"] = Model(os.environ["PEER_MODEL_PATH"])
    state["redis"] = Redis.from_url(os.environ["REDIS_URL"])
    state["prefix"] = os.environ.get("REDIS_KEY_PREFIX", "")
    yield
    await state["redis"].aclose()


app = FastAPI(lifespan=lifespan)


@app.post("/api/score")
async def score(event: PaymentEvent) -> Scored:
    model: Model = state["model"]
    user = user_features(await state["redis"].get(f"{state['prefix']}user:{event.user_id}"))
    risk = model.score(model.row(event, user))
    return Scored(
        event_id=event.event_id, risk_score=round(risk, 6), decision=model.decide(risk), model_version=model.version
    )


@app.get("/api/health/ready")
async def ready() -> dict[str, str]:
    return {"status": "ready"}
