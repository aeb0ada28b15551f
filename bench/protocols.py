"""The same model through `/api/score`, V2 REST and V2 gRPC, at 16 concurrent clients, in one run.

    .venv/bin/python -m bench.protocols [--rounds 5] [--seconds 4] [--clients 16] [--out bench-out]

One app process (`shared.adapters.http.asgi:app` under uvicorn, GRPC_PORT set: the gRPC server runs in the
same process as the HTTP one) serves all three. Each protocol gets a closed loop of `clients`
concurrent callers for `seconds`, and the protocols take turns, round after round (the order
rotates), so the machine's noise falls on each alike; figures are medians over rounds, and
ratios are taken round by round. Every request is a fresh row (a cache miss): `/api/score`
sends unique events (features, model, decision); V2 sends one row of random features (model
only). The HTTP clients speak raw HTTP/1.1 keep-alive over asyncio (cheap on a 2-core
machine); the gRPC client is grpc.aio on one channel with `raw_input_contents`. Beside latency
and throughput, each round records the server process's CPU time per request (from /proc):
the protocol's cost on the server, whatever the client and the neighbours spend.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench.loadgen import _read_response, _request, event_body
from bench.servers import free_port, start_server

Call = Callable[[int], Awaitable[None]]
PROTOCOLS = ("api_score", "v2_rest", "v2_grpc")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its children (Linux /proc), all threads."""
    total, pids = 0, [pid]
    while pids:
        p = pids.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
            pids.extend(int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split())
        except OSError:
            continue
    return total / os.sysconf("SC_CLK_TCK")


async def closed_loop(call: Call, clients: int, seconds: float) -> dict[str, float]:
    """`clients` callers, each calling again as soon as it is answered, for `seconds`."""
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    counter = iter(range(10**9))

    async def client() -> None:
        while time.perf_counter() < stop:
            n = next(counter)
            started = time.perf_counter()
            await call(n)
            latencies.append((time.perf_counter() - started) * 1000)

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2],
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "n": float(len(latencies)),
    }


class HttpPool:
    """Keep-alive HTTP/1.1 connections, one per client (taken and returned around each call)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.free: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def post(self, path: str, body: bytes, content_type: str = "application/json") -> bytes:
        conn = self.free.pop() if self.free else await asyncio.open_connection("127.0.0.1", self.port)
        reader, writer = conn
        writer.write(_request(path, body).replace(b"application/json", content_type.encode(), 1))
        status, answer = await _read_response(reader)
        self.free.append(conn)
        if status != 200:
            raise RuntimeError(f"{path}: {status} {answer[:200]!r}")
        return answer

    def close(self) -> None:
        for _, writer in self.free:
            writer.close()


def v2_body(input_name: str, width: int, n: int) -> bytes:
    row = np.random.default_rng(n).random(width, dtype=np.float32)
    tensor = {"name": input_name, "datatype": "FP32", "shape": [1, width], "data": row.tolist()}
    return orjson.dumps({"id": str(n), "inputs": [tensor]})


async def run(rounds: int, seconds: float, clients: int) -> dict[str, Any]:
    import grpc

    from shared.adapters.oip import grpc_predict_v2_pb2 as pb

    grpc_port = free_port()
    env = {"GRPC_PORT": str(grpc_port), "LOG_LEVEL": "WARNING", "REDIS_URL": ""}
    server = start_server("protocols", "shared.adapters.http.asgi:app", env)
    try:
        meta = json.load(urllib.request.urlopen(f"http://127.0.0.1:{server.port}/v2/models/fraud", timeout=5))
        (tensor,) = meta["inputs"]
        name, width = tensor["name"], tensor["shape"][1]
        http = HttpPool(server.port)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}")
        await asyncio.wait_for(channel.channel_ready(), 30)
        infer = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        offset = [0]

        async def api_score(n: int) -> None:
            await http.post("/api/score", event_body(offset[0] + n))

        async def v2_rest(n: int) -> None:
            await http.post("/v2/models/fraud/infer", v2_body(name, width, offset[0] + n))

        async def v2_grpc(n: int) -> None:
            row = np.random.default_rng(offset[0] + n).random(width, dtype=np.float32)
            request = pb.ModelInferRequest(model_name="fraud", id=str(n), raw_input_contents=[row.tobytes()])
            request.inputs.add(name=name, datatype="FP32", shape=[1, width])
            await infer(request)

        calls: dict[str, Call] = {"api_score": api_score, "v2_rest": v2_rest, "v2_grpc": v2_grpc}
        for proto in PROTOCOLS:  # warm-up: connections, first batches, the JIT of nothing
            await closed_loop(calls[proto], clients, 1.0)
        results: dict[str, list[dict[str, float]]] = {p: [] for p in PROTOCOLS}
        for r in range(rounds):
            order = PROTOCOLS[r % 3 :] + PROTOCOLS[: r % 3]
            for proto in order:
                offset[0] += 10_000_000  # fresh rows: every request a cache miss
                before = cpu_s(server.process.pid)
                result = await closed_loop(calls[proto], clients, seconds)
                result["server_cpu_us"] = (cpu_s(server.process.pid) - before) / result["n"] * 1e6
                results[proto].append(result)
                print(f"round {r + 1} {proto:9s} " + "  ".join(f"{k} {v:.2f}" for k, v in results[proto][-1].items()),
                      flush=True)  # fmt: skip
        await channel.close(None)
        http.close()
    finally:
        server.stop()
    return summarize(results, clients, seconds)


def summarize(results: dict[str, list[dict[str, float]]], clients: int, seconds: float) -> dict[str, Any]:
    """Medians over rounds, and round-by-round ratios against gRPC."""
    keys = ("rps", "p50_ms", "p99_ms", "server_cpu_us")
    medians = {p: {k: statistics.median(r.get(k, 0.0) for r in rs) for k in keys} for p, rs in results.items()}
    grpc_rounds = results["v2_grpc"]
    ratios = {
        p: {
            "rps_vs_grpc": statistics.median(a["rps"] / g["rps"] for a, g in zip(rs, grpc_rounds, strict=True)),
            "p50_minus_grpc_ms": statistics.median(a["p50_ms"] - g["p50_ms"] for a, g in zip(rs, grpc_rounds, strict=True)),
        }
        for p, rs in results.items()
    }  # fmt: skip
    return {"clients": clients, "seconds": seconds, "rounds": len(grpc_rounds), "medians": medians, "ratios": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--out", default="bench-out")
    args = parser.parse_args()
    summary = asyncio.run(run(args.rounds, args.seconds, args.clients))
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    (out / "protocols.json").write_text(json.dumps(summary, indent=2))
    print(f"\n{'protocol':10s} {'req/s':>8s} {'p50 ms':>8s} {'p99 ms':>8s} {'server CPU µs':>14s} "
          f"{'req/s ÷ gRPC':>13s} {'p50 - gRPC ms':>14s}")  # fmt: skip
    for proto in PROTOCOLS:
        m, r = summary["medians"][proto], summary["ratios"][proto]
        print(f"{proto:10s} {m['rps']:8.0f} {m['p50_ms']:8.2f} {m['p99_ms']:8.2f} {m['server_cpu_us']:14.0f} "
              f"{r['rps_vs_grpc']:13.2f} {r['p50_minus_grpc_ms']:14.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
