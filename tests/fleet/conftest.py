from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.telemetry import metrics


@pytest.fixture
def model(request: pytest.FixtureRequest) -> Iterator[str]:
    """A model name of this test's own: the drift gauges are process-wide."""
    name = f"drift-{request.node.name}"
    yield name
    for gauge in (metrics.DRIFT_PSI, metrics.DRIFT_DEFAULTED):
        for key in [k for k in gauge.values if k[0] == name]:
            del gauge.values[key]
