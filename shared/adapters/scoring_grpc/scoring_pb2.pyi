from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScoreRequest(_message.Message):
    __slots__ = ("event", "model", "explain", "id")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    event: bytes
    model: str
    explain: bool
    id: str
    def __init__(self, event: _Optional[bytes] = ..., model: _Optional[str] = ..., explain: bool = ..., id: _Optional[str] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("scored",)
    SCORED_FIELD_NUMBER: _ClassVar[int]
    scored: bytes
    def __init__(self, scored: _Optional[bytes] = ...) -> None: ...

class ScoreStreamRequest(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[ScoreRequest]
    def __init__(self, events: _Optional[_Iterable[_Union[ScoreRequest, _Mapping]]] = ...) -> None: ...

class ScoreStreamResponse(_message.Message):
    __slots__ = ("answers",)
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.RepeatedCompositeFieldContainer[ScoreAnswer]
    def __init__(self, answers: _Optional[_Iterable[_Union[ScoreAnswer, _Mapping]]] = ...) -> None: ...

class ScoreAnswer(_message.Message):
    __slots__ = ("message", "index", "id", "event_id", "scored", "error")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    SCORED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    message: int
    index: int
    id: str
    event_id: str
    scored: bytes
    error: Error
    def __init__(self, message: _Optional[int] = ..., index: _Optional[int] = ..., id: _Optional[str] = ..., event_id: _Optional[str] = ..., scored: _Optional[bytes] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "detail", "status", "grpc_status")
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GRPC_STATUS_FIELD_NUMBER: _ClassVar[int]
    code: str
    detail: str
    status: int
    grpc_status: str
    def __init__(self, code: _Optional[str] = ..., detail: _Optional[str] = ..., status: _Optional[int] = ..., grpc_status: _Optional[str] = ...) -> None: ...
