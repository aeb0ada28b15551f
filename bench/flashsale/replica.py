"""One replica, request by request: the host's throttle, the app's admission, one worker's CPU, I/O.

A small discrete-event loop (a heap of timed events), not SimPy: the fleet simulation asks for
thousands of replica-windows at a few thousand requests each, and a loop specialised to these five
events runs them several times faster than generic processes would (docs/capacity.md says so).

What a request meets, in order:
1. the Functions host's throttle: past `maxOutstandingRequests` (host.json) it answers 429 at once;
2. admission as shared/runtime/admission.py implements it (`Admission.take`, `refuses`, `_wait`,
   `_expire`, `leave`, `_handed`; its constants INTERVAL_S and RELEASE_ALPHA are imported from
   there): MAX_INFLIGHT slots, a FIFO wait of at most MAX_QUEUE_WAIT_MS for the rest, refused at
   arrival past MAX_QUEUED waiters or, once the queue *stands* (every waiter handed a slot over a
   whole INTERVAL_S had waited past QUEUE_TARGET_MS), when the waiters ahead times the measured
   interval between slots freed exceeds QUEUE_TARGET_MS; a waiter whose wait runs out is refused
   then; the slot passes straight to the longest waiter on leave;
3. with a slot, its CPU on the worker's one event loop (FIFO, `servers` of them: one worker
   process per replica, FUNCTIONS_WORKER_PROCESS_COUNT=1), then its I/O (Redis, the review), which
   holds the slot but not the CPU; past REQUEST_TIMEOUT_MS it is answered 503 (`DeadlineExceeded`).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from shared.runtime.admission import INTERVAL_S, RELEASE_ALPHA

__all__ = ["AdmissionRule", "ReplicaWindow", "simulate_replica"]

_ARRIVE, _CPU_DONE, _DONE, _EXPIRE = 0, 1, 2, 3


@dataclass(frozen=True)
class AdmissionRule:
    """The app's and the host's limits, in seconds (infra.ScaleRules carries them in ms)."""

    max_inflight: int = 16  # 0: no cap (then nothing waits or is refused by admission)
    max_queued: int = 64
    max_wait_s: float = 0.020
    target_s: float = 0.005
    timeout_s: float = 2.0
    host_max_outstanding: int = 0  # 0: no host throttle


@dataclass
class ReplicaWindow:
    """What one replica did with the requests that arrived in the measured part of a window."""

    latencies_s: np.ndarray  # of the requests answered 200, arrival to answer, inside the replica
    arrived: int
    shed: int  # refused by admission (503 Overloaded), at arrival or when a wait ran out
    throttled: int  # refused by the host (429)
    timed_out: int  # admitted, past REQUEST_TIMEOUT_MS (503)
    busy: float  # share of the window the CPU servers were busy (per server)
    inflight: float  # time-average of requests inside the replica (host's view: admitted or waiting)


class _Loop:
    """The state of one replica; every method is one of admission.py's, on simulated time."""

    def __init__(self, rule: AdmissionRule, servers: int) -> None:
        self.rule, self.servers = rule, servers
        self.events: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.inflight = 0
        self.waiting: deque[int] = deque()
        self.standing, self.above_since, self.release_s, self.released_at = False, -1.0, 0.0, 0.0
        self.cpu_queue: deque[int] = deque()
        self.cpu_busy = 0
        self.outstanding = 0

    def at(self, when: float, kind: int, req: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, kind, req))

    def refuses(self) -> bool:
        ahead = len(self.waiting)
        slow = self.standing and ahead and (ahead + 1) * self.release_s > self.rule.target_s
        return ahead >= self.rule.max_queued or bool(slow)

    def emptied(self) -> None:
        self.above_since, self.standing, self.release_s = -1.0, False, 0.0

    def handed(self, since: float, now: float) -> None:
        interval = now - self.released_at
        self.release_s = (
            interval if not self.release_s else self.release_s + RELEASE_ALPHA * (interval - self.release_s)
        )
        self.released_at = now
        if not self.waiting:
            self.emptied()
        elif self.standing:
            pass
        elif now - since < self.rule.target_s:
            self.above_since = -1.0
        elif self.above_since < 0:
            self.above_since = now
        elif now - self.above_since >= INTERVAL_S:
            self.standing = True


def simulate_replica(
    rate: float,
    seconds: float,
    cpu_s: np.ndarray,
    io_s: np.ndarray,
    rule: AdmissionRule,
    *,
    servers: int = 1,
    warmup_s: float = 0.5,
    rng: np.random.Generator,
) -> ReplicaWindow:
    """Poisson arrivals at `rate`/s for `warmup_s + seconds`; what the last `seconds` saw.

    `cpu_s` and `io_s` are samples of one request's CPU and I/O time, drawn from in turn."""
    horizon = warmup_s + seconds
    count = int(rng.poisson(rate * horizon)) if rate > 0 else 0
    arrivals = np.sort(rng.uniform(0.0, horizon, count))
    cpu = cpu_s[rng.integers(0, len(cpu_s), count)] if count else cpu_s[:0]
    io = io_s[rng.integers(0, len(io_s), count)] if count else io_s[:0]
    state = np.zeros(count, dtype=np.int8)  # 0 new, 1 waiting, 2 in work, 3 refused or done
    since = np.zeros(count)
    done = np.full(count, np.nan)
    loop = _Loop(rule, servers)
    for i in range(count):
        loop.at(float(arrivals[i]), _ARRIVE, i)
    shed = throttled = 0
    busy_s = inflight_area = last = 0.0
    limit = rule.max_inflight

    def start(req: int, now: float) -> None:
        state[req] = 2
        if loop.cpu_busy < servers:
            loop.cpu_busy += 1
            loop.at(now + float(cpu[req]), _CPU_DONE, req)
        else:
            loop.cpu_queue.append(req)

    def leave(now: float) -> None:
        while loop.waiting:
            nxt = loop.waiting.popleft()
            loop.handed(float(since[nxt]), now)
            start(nxt, now)
            return
        loop.emptied()
        loop.inflight -= 1

    def refused(req: int, now: float) -> None:
        nonlocal shed
        state[req] = 3
        loop.outstanding -= 1
        if arrivals[req] >= warmup_s:
            shed += 1

    while loop.events:
        now, _, kind, req = heapq.heappop(loop.events)
        if now >= warmup_s:
            span = now - max(last, warmup_s)
            busy_s += span * loop.cpu_busy
            inflight_area += span * loop.outstanding
        last = now
        if kind == _ARRIVE:
            if rule.host_max_outstanding and loop.outstanding >= rule.host_max_outstanding:
                state[req] = 3
                throttled += arrivals[req] >= warmup_s
                continue
            loop.outstanding += 1
            if not limit or (loop.inflight < limit and not loop.waiting):
                loop.inflight += 1
                start(req, now)
            elif loop.refuses():
                refused(req, now)
            else:
                if not loop.waiting:
                    loop.released_at = now
                state[req], since[req] = 1, now
                loop.waiting.append(req)
                loop.at(now + (rule.target_s if loop.standing else rule.max_wait_s), _EXPIRE, req)
        elif kind == _CPU_DONE:
            if loop.cpu_queue:
                nxt = loop.cpu_queue.popleft()
                loop.at(now + float(cpu[nxt]), _CPU_DONE, nxt)
            else:
                loop.cpu_busy -= 1
            loop.at(now + float(io[req]), _DONE, req)
        elif kind == _DONE:
            done[req] = now
            state[req] = 3
            loop.outstanding -= 1
            if limit:
                leave(now)
        elif state[req] == 1:  # _EXPIRE of a request still waiting
            loop.waiting.remove(req)
            if not loop.waiting:
                loop.emptied()
            refused(req, now)
    measured = arrivals >= warmup_s
    latency = (done - arrivals)[measured]
    answered = latency[~np.isnan(latency)]
    timed_out = int(np.count_nonzero(answered > rule.timeout_s))
    return ReplicaWindow(
        latencies_s=answered[answered <= rule.timeout_s],
        arrived=int(np.count_nonzero(measured)),
        shed=shed,
        throttled=int(throttled),
        timed_out=timed_out,
        busy=busy_s / seconds / servers if seconds else 0.0,
        inflight=inflight_area / seconds if seconds else 0.0,
    )
