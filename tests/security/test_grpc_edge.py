"""The V2 gRPC port guards itself: a key on every call, checked before a slot is held; a cap on calls,
on a connection's streams and on message size; a deadline for a request message that never comes; and
admission taken before a tensor is decoded. Over real grpc.aio channels and tritonclient."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import numpy as np
import pytest

from shared.adapters.oip import grpc_predict_v2_pb2 as pb
from shared.adapters.oip.grpc_server import KEY_METADATA, SERVICE, serve_grpc, streams_per_connection
from shared.core.service import ScoringService
from shared.settings import AdmissionPolicy, Settings
from tests.conftest import closed_port

pytestmark = pytest.mark.timeout(60)
KEY, NEXT_KEY = "k" * 32, "n" * 32
Build = Callable[[Settings], Awaitable[ScoringService]]


def connection(port: int) -> grpc.aio.Channel:
    """A channel on its own TCP connection (grpc shares one between channels of the same target)."""
    return grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])


class Served:
    def __init__(self, service: ScoringService, port: int) -> None:
        self.service = service
        self.channel = connection(port)
        self.port = port

    async def call(self, method: str, request: object, response: type, key: str | None = KEY) -> object:
        stub = self.channel.unary_unary(
            f"/{SERVICE}/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response.FromString,
        )
        metadata = ((KEY_METADATA, key),) if key is not None else None
        return await stub(request, metadata=metadata, timeout=10)

    async def infer(self, request: pb.ModelInferRequest, key: str | None = KEY) -> pb.ModelInferResponse:
        answer = await self.call("ModelInfer", request, pb.ModelInferResponse, key)
        assert isinstance(answer, pb.ModelInferResponse)
        return answer


async def serve(build: Build, settings: Settings, **changes: object) -> AsyncIterator[Served]:
    service = await build(dataclasses.replace(settings, grpc_keys=f"{KEY},{NEXT_KEY}", **changes))
    port = closed_port()
    task = asyncio.create_task(serve_grpc(service, "127.0.0.1", port, grace_s=0.1))
    served = Served(service, port)
    await asyncio.wait_for(served.channel.channel_ready(), 10)
    yield served
    await served.channel.close()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
async def served(services: Build, settings: Settings) -> AsyncIterator[Served]:
    async for s in serve(services, settings):
        yield s


def infer_request(rows: int = 2, datatype: str = "FP32", raw: bytes | None = None) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="fraud")
    request.inputs.add(name="features", datatype=datatype, shape=[rows, 4])
    data = np.full((rows, 4), 0.5, dtype=np.float32).tobytes() if raw is None else raw
    request.raw_input_contents.append(data)
    return request


async def test_a_call_without_a_valid_key_is_unauthenticated(served: Served) -> None:
    for key in (None, "", "k" * 31, KEY + "x", KEY.upper()):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await served.infer(infer_request(), key=key)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, key
        with pytest.raises(grpc.aio.AioRpcError) as probe:
            await served.call("ServerLive", pb.ServerLiveRequest(), pb.ServerLiveResponse, key)
        assert probe.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_either_key_of_a_rotation_is_answered(served: Served) -> None:
    for key in (KEY, NEXT_KEY):
        answer = await served.infer(infer_request(), key=key)
        assert answer.model_name == "fraud" and len(answer.raw_output_contents[0]) == 2 * 4


async def test_without_keys_a_port_off_loopback_refuses_every_call(services: Build, settings: Settings) -> None:
    service = await services(settings)  # NOTE: GRPC_KEYS unset
    port = closed_port()
    task = asyncio.create_task(serve_grpc(service, "0.0.0.0", port, grace_s=0.1))  # noqa: S104 the case refused
    served = Served(service, port)
    try:
        await asyncio.wait_for(served.channel.channel_ready(), 10)
        for key in (None, KEY, ""):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await served.call("ServerLive", pb.ServerLiveRequest(), pb.ServerLiveResponse, key)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        await served.channel.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_calls_past_the_cap_are_resource_exhausted(services: Build, settings: Settings) -> None:
    one = AdmissionPolicy(max_inflight=1, max_queued=8, max_queue_wait_ms=2000, queue_target_ms=2000)
    async for s in serve(services, settings, grpc_max_concurrent=1, admission=one):
        async with s.service.admission.admitted():  # NOTE: the one slot held: the first call waits in the work
            first = asyncio.create_task(s.infer(infer_request()))
            while s.service.admission.waiting == 0:
                await asyncio.sleep(0.005)
            other = Served(s.service, s.port)  # NOTE: another connection: this one may open no second stream
            try:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await other.infer(infer_request())
            finally:
                await other.channel.close()
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (await first).model_name == "fraud"


async def test_a_message_over_the_cap_is_refused_before_it_is_read(served: Served) -> None:
    cap = served.service.settings.max_body_bytes * 16
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await served.infer(infer_request(raw=b"\0" * (cap + 1)))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_admission_comes_before_the_tensor_is_decoded(services: Build, settings: Settings) -> None:
    """With every slot taken and no room to wait, a request whose tensor would not even decode is
    refused as overload (UNAVAILABLE): nothing of it was decoded. Once free, the decode refuses it."""
    full = AdmissionPolicy(max_inflight=1, max_queued=0)
    broken = infer_request(rows=2, raw=b"\0" * 7)  # 7 bytes for a [2, 4] FP32 tensor
    async for s in serve(services, settings, admission=full):
        async with s.service.admission.admitted():
            with pytest.raises(grpc.aio.AioRpcError) as shed:
                await s.infer(broken)
            assert shed.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.aio.AioRpcError) as invalid:
            await s.infer(broken)
        assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert s.service.admission.inflight == 0  # NOTE: the slot taken before decoding was given back, once


async def test_an_input_the_model_cannot_take_is_refused_from_its_head(served: Served) -> None:
    strings = pb.ModelInferRequest(model_name="fraud")
    strings.inputs.add(name="features", datatype="BYTES", shape=[2, 4])
    strings.raw_input_contents.append(b"\xff" * 64)  # NOTE: not even length-prefixed: never decoded
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await served.infer(strings)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "FP32" in (refused.value.details() or "")


async def test_one_slot_per_request_however_many_rows(served: Served) -> None:
    admission = served.service.admission
    before = admission.total_admitted
    await served.infer(infer_request(rows=8))
    assert admission.total_admitted == before + 1 and admission.inflight == 0


async def test_tritonclient_passes_the_key_as_its_headers(served: Served) -> None:
    grpcclient = pytest.importorskip("tritonclient.grpc")
    from tritonclient.utils import InferenceServerException

    def call(headers: dict[str, str] | None) -> np.ndarray:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{served.port}")
        try:
            tensor = grpcclient.InferInput("features", [2, 4], "FP32")
            tensor.set_data_from_numpy(np.full((2, 4), 0.5, dtype=np.float32))
            return client.infer("fraud", [tensor], headers=headers).as_numpy("score")
        finally:
            client.close()

    assert (await asyncio.to_thread(call, {KEY_METADATA: KEY})).shape == (2, 1)
    with pytest.raises(InferenceServerException, match=r"UNAUTHENTICATED|key"):
        await asyncio.to_thread(call, None)


async def _stall(channel: grpc.aio.Channel, key: str | None) -> grpc.StatusCode:
    """A call that opens its stream (its metadata sent) and never sends its request message; the status
    it ends with."""
    stub = channel.stream_unary(
        f"/{SERVICE}/ServerLive",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.ServerLiveResponse.FromString,
    )
    never = asyncio.Event()

    async def nothing() -> AsyncIterator[pb.ServerLiveRequest]:
        await never.wait()
        yield pb.ServerLiveRequest()  # pragma: no cover - never reached

    metadata = ((KEY_METADATA, key),) if key is not None else None
    try:
        await stub(nothing(), metadata=metadata, timeout=30)
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def _keyed_call_within(s: Served, seconds: float) -> float:
    """Seconds until a keyed ServerLive on a fresh connection answers OK, within `seconds`."""
    started = time.monotonic()
    async with connection(s.port) as fresh:
        stub = fresh.unary_unary(
            f"/{SERVICE}/ServerLive",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.ServerLiveResponse.FromString,
        )
        answer = await stub(pb.ServerLiveRequest(), metadata=((KEY_METADATA, KEY),), timeout=seconds)
    assert answer.live
    return time.monotonic() - started


async def test_unkeyed_callers_holding_streams_open_never_starve_a_keyed_caller(
    services: Build, settings: Settings
) -> None:
    """More unkeyed stalled calls than there are slots, over many connections: each is refused from
    its metadata before its message is awaited, and a keyed call answers OK within 1 s."""
    async for s in serve(services, settings, grpc_max_concurrent=4, body_timeout_ms=60_000):
        channels = [connection(s.port) for _ in range(4)]
        stalls = [asyncio.create_task(_stall(channels[i % 4], None)) for i in range(16)]
        try:
            await asyncio.sleep(0.3)  # NOTE: every stall has sent its metadata by now
            assert await _keyed_call_within(s, 1.0) < 1.0
            assert set(await asyncio.wait_for(asyncio.gather(*stalls), 5)) == {grpc.StatusCode.UNAUTHENTICATED}
        finally:
            for task in stalls:
                task.cancel()
            for channel in channels:
                await channel.close()


async def test_one_connection_cannot_hold_every_slot(services: Build, settings: Settings) -> None:
    """A keyed caller that opens as many stalled streams as the server has slots, on one connection,
    holds at most a quarter of them: a keyed call on another connection answers OK within 1 s."""
    async for s in serve(services, settings, grpc_max_concurrent=8, body_timeout_ms=60_000):
        assert streams_per_connection(8) == 2
        stalls = [asyncio.create_task(_stall(s.channel, KEY)) for _ in range(8)]
        try:
            await asyncio.sleep(0.3)
            assert await _keyed_call_within(s, 1.0) < 1.0
        finally:
            for task in stalls:
                task.cancel()
            await asyncio.gather(*stalls, return_exceptions=True)


def client_ports(port: int) -> set[int]:
    """Local ports of the established TCP connections to `port` on this machine (/proc/net/tcp*)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, remote, state = line.split()[1:4]
            if state == "01" and int(remote.rsplit(":", 1)[1], 16) == port:
                found.add(int(local.rsplit(":", 1)[1], 16))
    return found


async def test_an_aged_connection_is_asked_to_go_and_its_client_reconnects(services: Build, settings: Settings) -> None:
    """The port is balanced by connection: a caller that keeps one open would never reach a replica
    a scale-out adds. Past GRPC_MAX_CONNECTION_AGE_MS the server sends GOAWAY and the client's
    next calls go over a new connection (a new local port), none of them failing."""
    async for s in serve(services, settings, grpc_max_connection_age_ms=1000, grpc_max_connection_age_grace_ms=1000):
        seen: set[int] = set()
        for _ in range(20):
            await s.call("ServerLive", pb.ServerLiveRequest(), pb.ServerLiveResponse)
            seen |= client_ports(s.port)
            await asyncio.sleep(0.2)
        assert len(seen) >= 2, f"one connection for 4 s under a 1 s age: {seen}"


async def test_a_request_message_that_never_comes_is_answered_deadline_exceeded(
    services: Build, settings: Settings
) -> None:
    """A keyed call that never sends its message ends at BODY_TIMEOUT_MS and gives its slot back."""
    async for s in serve(services, settings, grpc_max_concurrent=1, body_timeout_ms=300):
        started = time.monotonic()
        assert await asyncio.wait_for(_stall(s.channel, KEY), 10) == grpc.StatusCode.DEADLINE_EXCEEDED
        assert 0.25 < time.monotonic() - started < 3.0
        assert await _keyed_call_within(s, 1.0) < 1.0  # the one slot is free again
