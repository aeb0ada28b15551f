"""What a control call says about itself: why it was made (`reason`), decoded within limits.

Every control action (pin, release, shadow, canary, abort, promote) may carry `{"reason": "..."}`
in its body, beside its own fields or alone (DELETE and promote take no other field); it is kept
with the action in the fleet's audit (shared/stores/control.py) and shown by
`GET /api/models/{name}/rollout`. A reason is free text from whoever holds the admin key: at most
200 characters, none a control character, so that it cannot forge a line of the audit stream.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from shared.errors import InvalidEvent, MalformedJson

__all__ = ["ControlNote", "decode_note"]


class ControlNote(msgspec.Struct, frozen=True):
    """The part of a control call's body that every action shares: why."""

    reason: Annotated[str, msgspec.Meta(max_length=200, pattern=r"\A[^\x00-\x1f\x7f]*\Z")] = ""


_decoder = msgspec.json.Decoder(ControlNote)


def decode_note(body: bytes) -> ControlNote:
    """`{"reason": "..."}` (other fields ignored; an empty body: no reason), or the error naming what is wrong."""
    if not body.strip():
        return ControlNote()
    try:
        return _decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise InvalidEvent(f"reason: {str(exc).partition(' - ')[0]}") from None
    except UnicodeDecodeError:
        raise MalformedJson("body is not valid UTF-8") from None
    except RecursionError:
        raise MalformedJson("JSON is nested too deeply") from None
    except msgspec.DecodeError as exc:  # the same words as the action's own decoder (events.py)
        raise MalformedJson(str(exc)) from None
