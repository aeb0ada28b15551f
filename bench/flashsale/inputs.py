"""What one request costs, from the project's own measurements, and the few figures that are not.

Measured (bench/flashsale/measured.json, written by `python -m bench.flashsale.measure`, which says
how): the worker's CPU per `score` invocation, per event of a 64-event `score_batch`, and the wall
time of a 64-message `payments` batch (bench/worker.py, the app through the real worker runtime);
the spread of a request's time inside the app (the open-loop generator's server-side
`timings_ms.total` at the lowest rate: the ratio of its p99 to its median gives the spread of
every service time drawn here).

Provisional: everything in `PROVISIONAL` below, the ONE place such figures live. Each is a guess
until measured in Azure; docs/capacity.md lists them and what would replace them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DOOR_PHASES",
    "MEASURED",
    "PROVISIONAL",
    "Provisional",
    "ServiceTimes",
    "Spread",
    "load_measured",
    "service_times",
]

MEASURED = Path(__file__).with_name("measured.json")
# bench.worker's phase for each door that never passes the host (the app's own gRPC port)
DOOR_PHASES = {"grpc-unary": "grpc_unary", "grpc-stream": "grpc_stream_16"}
Z99 = 2.3263  # the standard normal's 99th percentile


@dataclass(frozen=True)
class Spread:
    """A log-normal time given by its median and its 99th percentile (any unit)."""

    median: float
    p99: float

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        sigma = math.log(self.p99 / self.median) / Z99 if self.p99 > self.median else 0.0
        return self.median * np.exp(sigma * rng.standard_normal(n))


@dataclass(frozen=True)
class Provisional:
    """PROVISIONAL: figures not measured here. Replace each with the Azure measurement named."""

    # Production's worker CPU per invocation / bench.worker's stand-in's. issue 22 measured the real 4.34
    # worker at 1.04 ms where the stand-in spent 423 µs (2.46x) on a quiet machine; this machine's
    # measured.json run already reads ~1 ms, so no discount is applied on top (replace: the `score`
    # function's CPU per invocation from the replica's metrics in Azure).
    real_worker_factor: float = 1.0
    # The Functions host's CPU per invocation / the worker's ("as much again in the host", issue 22):
    # it counts in the CPU rule's utilisation, not in the worker's event loop.
    host_cpu_ratio: float = 1.0
    # Azure Managed Redis, in-region, one pipelined round trip per request (replace: the app's
    # `features` + `cache` stage timings in Azure).
    redis_ms: Spread = field(default_factory=lambda: Spread(0.6, 2.5))
    # Client -> ingress (Envoy) -> host -> worker and back, outside the worker's event loop.
    network_ms: Spread = field(default_factory=lambda: Spread(2.0, 8.0))
    # A queue batch in Azure on top of bench.worker's `payments` batch: Redis find/keep, the publish
    # round trip, the host's settlement and next receive (docs/capacity.md `B'`: ~15 ms).
    queue_overhead_ms: Spread = field(default_factory=lambda: Spread(15.0, 40.0))
    # A new replica on a node that has room: image start, host start, worker indexing, model load and
    # warm-up (~0.5 s measured), the startup probe (replace: ContainerAppSystemLogs' replica events).
    replica_start_s: Spread = field(default_factory=lambda: Spread(20.0, 60.0))
    # A new node of the Dedicated profile, when the replicas outgrow the nodes running.
    node_start_s: Spread = field(default_factory=lambda: Spread(180.0, 360.0))
    # Share of events in the review band sent to Azure OpenAI, and their wait (the HTTP path waits at
    # most LLM_TIMEOUT_MS = 150). Infra deploys no Azure OpenAI by default (deployOpenAi=false): 0.
    review_share: float = 0.0
    review_ms: Spread = field(default_factory=lambda: Spread(80.0, 150.0))
    # A Dedicated D8 node (8 vCPU, 32 GiB; 3 replicas of 2 vCPU / 4 GiB, main.bicep replicasPerNode) by
    # the hour, USD: README's estimate (~$450 a month, pay-as-you-go list price, East US, 2026-12-03),
    # not a live price sheet (replace: the region's price from the Azure pricing calculator).
    node_hour_usd: float = 0.62


PROVISIONAL = Provisional()


@dataclass(frozen=True)
class ServiceTimes:
    """Samples (seconds) the simulation draws from, per path."""

    single_cpu: np.ndarray  # one `score` invocation on the worker's event loop
    batch_cpu: np.ndarray  # one `score_batch` invocation of 64 events
    # the hostless doors' CPU per event, by path ("grpc-unary": a `Score` call; "grpc-stream": an event on
    # a `ScoreStream`, 16 a message), where measured (`bench.worker --doors`)
    doors: dict[str, np.ndarray]
    io: np.ndarray  # what holds the slot but not the CPU (Redis, the review)
    network: np.ndarray  # outside the replica
    queue_fixed: np.ndarray  # a queue batch's time that does not grow with its size
    queue_per_message_s: float  # and what each message adds
    queue_cpu_per_message_s: float  # the worker's CPU per queued message (the CPU rule)
    sigma: float = 0.0

    def cpu(self, path: str) -> np.ndarray:
        """The worker CPU of one request on `path` (a 64-event call on "http-batch")."""
        if path == "http-batch":
            return self.batch_cpu
        if path in DOOR_PHASES:
            if path not in self.doors:
                raise ValueError(
                    f"measured.json has no {DOOR_PHASES[path]!r}: run python -m bench.flashsale.measure --worker-only 3"
                )
            return self.doors[path]
        return self.single_cpu


def load_measured(path: Path = MEASURED) -> dict[str, Any]:
    """measured.json, refusing a file without the worker's figures (they decide every service time)."""
    measured: dict[str, Any] = json.loads(path.read_text())
    if not measured.get("worker"):
        raise ValueError(f"{path} has no worker figures: run python -m bench.flashsale.measure with .venv-worker")
    return measured


def _lognormal_with_mean(mean: float, sigma: float, rng: np.random.Generator, n: int) -> np.ndarray:
    return mean * np.exp(sigma * rng.standard_normal(n) - sigma * sigma / 2)


def service_times(
    measured: dict[str, Any], provisional: Provisional = PROVISIONAL, *, seed: int = 7, n: int = 100_000
) -> ServiceTimes:
    """Draw the per-request samples: the measured means, the measured spread, the provisional rest."""
    rng = np.random.default_rng(seed)
    worker = measured["worker"]
    shape = measured["open_loop_one_process"]["points"][0]["server_ms"]
    sigma = math.log(shape["0.99"] / shape["0.5"]) / Z99
    single = worker["score"]["cpu_us_per_invocation"] * 1e-6 * provisional.real_worker_factor
    batch = 64 * worker["score_batch_64"]["cpu_us_per_event"] * 1e-6 + single * (provisional.real_worker_factor - 1)
    io = provisional.redis_ms.sample(rng, n) / 1000
    reviewed = rng.random(n) < provisional.review_share
    io[reviewed] += np.minimum(provisional.review_ms.sample(rng, int(reviewed.sum())), 150.0) / 1000
    payments = worker["payments_64"]
    doors = {
        path: _lognormal_with_mean(
            worker[phase]["cpu_us_per_event"] * 1e-6 * provisional.real_worker_factor, sigma, rng, n
        )
        for path, phase in DOOR_PHASES.items()
        if phase in worker  # NOTE: measured with `bench.worker --doors`; older files lack them
    }
    return ServiceTimes(
        single_cpu=_lognormal_with_mean(single, sigma, rng, n),
        batch_cpu=_lognormal_with_mean(batch, sigma, rng, n),
        doors=doors,
        io=io,
        network=provisional.network_ms.sample(rng, n) / 1000,
        queue_fixed=provisional.queue_overhead_ms.sample(rng, n) / 1000,
        queue_per_message_s=payments["ms_per_batch"] / 64 / 1000,
        queue_cpu_per_message_s=payments["cpu_us_per_event"] * 1e-6,
        sigma=sigma,
    )
