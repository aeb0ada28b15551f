"""The review's prompt: a versioned template file, and the only fields that leave the service.

`prompts/fraud-review.v2.json` holds the system message, the user message (with a
`{fields}` slot), the block the payer's note goes in (`note`, optional), and the JSON schema
the answer must follow (structured output, strict). A new wording is a new file and a new
version: the version goes into the cache key, so answers to an old wording are never served
for a new one.

The note is the payer's own text: it is sent apart from the other fields, between markers
that carry a fresh random nonce per request (text inside cannot close the block it sits in),
and the system message calls it untrusted data. That is defence in depth; the control is in
code: a review can only make a decision stricter (shared/review/reviewer.py).

What leaves the service is `fields()`, and nothing else: no event, user or merchant id.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Annotated, Any

import msgspec
import orjson

from shared.domain.events import PaymentEvent
from shared.domain.spec import Decision
from shared.errors import ReviewInvalid

__all__ = ["DEFAULT_PROMPT", "SENT_FIELDS", "Opinion", "Prompt"]

DEFAULT_PROMPT = Path(__file__).parent / "prompts" / "fraud-review.v2.json"
# the README's "What leaves the service" lists these; a test holds the two together.
SENT_FIELDS = (
    "amount",
    "currency",
    "merchant_category",
    "country",
    "channel",
    "hour_utc",
    "weekday",
    "note",
    "model_score",
    "model_decision",
)
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


class Opinion(msgspec.Struct, frozen=True):
    """The reviewer's answer, validated (the schema's bounds, which strict mode cannot state)."""

    risk_score: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
    decision: Decision
    rationale: Annotated[str, msgspec.Meta(max_length=2000)]


_opinion = msgspec.json.Decoder(Opinion)


def read_opinion(content: str | bytes | None) -> Opinion:
    """The answer's content as an `Opinion`, or `ReviewInvalid` saying what was wrong."""
    if not content:
        raise ReviewInvalid("the review came back empty")
    try:
        return _opinion.decode(content)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise ReviewInvalid(f"the review broke its schema: {exc}") from None


@dataclass(frozen=True)
class Prompt:
    """One version of the template."""

    version: str
    system: str
    user: str
    schema_name: str
    schema: dict[str, Any]
    note: str = ""  # the block the payer's note is sent in: {note} and {nonce} slots; "" → with the fields

    @classmethod
    def load(cls, path: Path = DEFAULT_PROMPT) -> Prompt:
        raw = orjson.loads(path.read_bytes())
        prompt = cls(raw["version"], raw["system"], raw["user"], raw["schema_name"], raw["schema"], raw.get("note", ""))
        if "{fields}" not in prompt.user:
            raise ValueError(f"{path}: the user message has no {{fields}} slot")
        if prompt.note and not ("{note}" in prompt.note and "{nonce}" in prompt.note):
            raise ValueError(f"{path}: the note block needs its {{note}} and {{nonce}} slots")
        return prompt

    @staticmethod
    def fields(event: PaymentEvent, score: float, decision: Decision) -> dict[str, object]:
        """What the review needs, and all that leaves the service (see SENT_FIELDS)."""
        moment = event.timestamp.astimezone(UTC)
        fields: dict[str, object] = {
            "amount": event.amount,
            "currency": event.currency,
            "merchant_category": event.merchant_category,
            "country": event.country,
            "channel": event.channel,
            "hour_utc": moment.hour,
            "weekday": _WEEKDAYS[moment.weekday()],
            "model_score": round(score, 4),
            "model_decision": decision,
        }
        if event.note:
            fields["note"] = event.note
        return fields

    def key(self, fields: dict[str, object], event: bytes) -> str:
        """The cache key of a question about one payment (`event`: its content digest): the same
        fields under the same wording get one answer for that payment only, so an answer a crafted
        question drew is never handed to another event (a redelivery of the same one reuses it)."""
        hashed = hashlib.blake2b(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS), digest_size=16, key=event)
        return f"llm:{self.version}:{hashed.hexdigest()}"

    def messages(self, fields: dict[str, object]) -> list[dict[str, str]]:
        """The chat messages; the note, when the template has a block for it, goes there, apart."""
        note = fields.get("note") if self.note else None
        if note is not None:
            fields = {k: v for k, v in fields.items() if k != "note"}
        body = orjson.dumps(fields, option=orjson.OPT_SORT_KEYS).decode()
        user = self.user.replace("{fields}", body)
        nonce = secrets.token_hex(8)
        if note is not None:
            # JSON-quoted as well: no newline or marker of the note's own survives as one
            user += self.note.replace("{nonce}", nonce).replace("{note}", orjson.dumps(note).decode())
        return [{"role": "system", "content": self.system.replace("{nonce}", nonce)}, {"role": "user", "content": user}]

    def response_format(self) -> dict[str, object]:
        return {"type": "json_schema", "json_schema": {"name": self.schema_name, "schema": self.schema, "strict": True}}
