"""The review's fixtures: a local server on Azure OpenAI's route, and settings that point at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from bench.llm_server import LlmServer
from shared.settings import ReviewPolicy, Settings

# NOTE: a key the local server accepts; not a secret (nothing else accepts it).
TEST_KEY = "local-test-key"


@pytest.fixture
def llm() -> Iterator[LlmServer]:
    with LlmServer() as server:
        yield server


@pytest.fixture
def reviewing(settings: Settings, llm: LlmServer) -> Callable[..., Settings]:
    """`reviewing(**policy)`: the test settings with reviews on, against the local server."""

    def make(**policy: Any) -> Settings:
        base: dict[str, Any] = {"endpoint": llm.endpoint, "api_key": TEST_KEY, "timeout_ms": 2000.0}
        return replace(settings, review=ReviewPolicy(**{**base, **policy}))

    return make
