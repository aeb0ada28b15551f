"""The gRPC server is a job of the core: started when the holder builds it, stopped with it."""

from __future__ import annotations

from dataclasses import replace

import grpc
import pytest

from shared.adapters.oip import grpc_predict_v2_pb2 as pb
from shared.adapters.oip.jobs import grpc_server
from shared.core.holder import ServiceHolder
from shared.settings import Settings
from tests.conftest import closed_port, port_frees


async def test_started_with_the_core_and_stopped_with_it(settings: Settings) -> None:
    port = closed_port()
    holder = ServiceHolder(lambda: replace(settings, grpc_port=port), on_built=[grpc_server("127.0.0.1")])
    service = await holder.get()
    try:
        assert "grpc" in service.background.running
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            live = channel.unary_unary(
                "/inference.GRPCInferenceService/ServerLive",
                request_serializer=pb.ServerLiveRequest.SerializeToString,
                response_deserializer=pb.ServerLiveResponse.FromString,
            )
            assert (await live(pb.ServerLiveRequest(), timeout=10)).live
    finally:
        await holder.aclose()
    assert await port_frees(port), "the gRPC server still holds its port after the core closed"


async def test_no_port_no_server(settings: Settings) -> None:
    holder = ServiceHolder(lambda: settings, on_built=[grpc_server("127.0.0.1")])
    service = await holder.get()
    assert service.settings.grpc_port == 0 and "grpc" not in service.background.running
    await holder.aclose()


@pytest.mark.parametrize("value", ["-1", "70000", "grpc"])
def test_a_bad_port_names_the_setting(value: str) -> None:
    from shared.errors import SettingsError

    with pytest.raises(SettingsError, match="GRPC_PORT"):
        Settings.from_env({"GRPC_PORT": value})


async def test_a_server_that_cannot_serve_keeps_the_replica_unready_until_it_does(settings: Settings) -> None:
    """A crash-looping listener (here its port is taken) is not ready; once it serves, ready again."""
    import asyncio
    import socket

    blocker = socket.create_server(("127.0.0.1", 0))
    port = blocker.getsockname()[1]
    holder = ServiceHolder(lambda: replace(settings, grpc_port=port), on_built=[grpc_server("127.0.0.1")])
    service = await holder.get()
    service.background._settle_s = 0.3  # NOTE: the default settle time, shortened for the test
    try:
        for _ in range(100):
            if service.background.restarts.get("grpc"):
                break
            await asyncio.sleep(0.02)
        readiness = service.readiness()
        assert not readiness.ready and "grpc" in readiness.detail and str(port) in readiness.detail
        blocker.close()
        for _ in range(200):
            if service.readiness().ready:
                break
            await asyncio.sleep(0.02)
        assert service.readiness().ready
    finally:
        blocker.close()
        await holder.aclose()
