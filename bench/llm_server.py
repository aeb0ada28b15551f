"""A local server that answers Azure OpenAI's chat-completions route, with scripted behaviour.

    POST /openai/deployments/{deployment}/chat/completions?api-version=...

It stands in for Azure OpenAI where that is not the subject (tests of the review, the
benchmark of its cost): the real `openai` client talks real HTTP to it. It checks what a
real endpoint would (the route, an api-version, a key or bearer token, a json_schema
response format) and answers like one: a completion whose content follows the schema,
or the scripted fault: slow, 429 with Retry-After, 500, content that breaks the schema.

    python -m bench.llm_server --port 8089 --delay-ms 50 [--fault 500|429|bad]

Every request body is kept (`requests`), so a test can see what left the service.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["Behaviour", "LlmServer"]


@dataclass
class Behaviour:
    """What the next requests get. `fault`: None, "429", "500" or "bad" (content off-schema)."""

    delay_s: float = 0.0
    fault: str | None = None
    retry_after: str = "2"
    risk_shift: float = 0.2  # the reviewer's score: the model's, shifted (so tests can tell them apart)
    # a fixed answer instead: e.g. ("approve", 0.0), a reviewer that followed a note's injected instructions
    verdict: tuple[str, float] | None = None


@dataclass
class LlmServer:
    """The server on 127.0.0.1 (`port` 0 picks a free one); `start` runs it in a thread."""

    port: int = 0
    behaviour: Behaviour = field(default_factory=Behaviour)
    requests: list[dict[str, Any]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LlmServer:
        owner = self

        class Handler(_Handler):
            server_owner = owner

        self._server = _Server(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="llm-server", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> LlmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # NOTE: the default backlog of 5 resets a burst of new connections


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # NOTE: else headers and body in two writes cost a 40 ms delayed ACK
    server_owner: LlmServer

    def log_message(self, format: str, *args: Any) -> None:
        return  # NOTE: quiet: the benchmark sends thousands

    def do_POST(self) -> None:
        owner = self.server_owner
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        url = urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if len(parts) != 5 or parts[:2] != ["openai", "deployments"] or parts[3:] != ["chat", "completions"]:
            return self._send(404, {"error": {"code": "404", "message": "Resource not found"}})
        if "api-version" not in parse_qs(url.query):
            return self._send(404, {"error": {"code": "404", "message": "api-version is required"}})
        if not (self.headers.get("api-key") or self.headers.get("authorization", "").startswith("Bearer ")):
            return self._send(401, {"error": {"code": "401", "message": "Access denied: no credentials"}})
        request = json.loads(body)
        owner.requests.append({"deployment": parts[2], "headers": dict(self.headers), "body": request})
        if request.get("response_format", {}).get("type") != "json_schema":
            return self._send(400, {"error": {"code": "400", "message": "expected a json_schema response format"}})
        behaviour = owner.behaviour
        if behaviour.delay_s:
            time.sleep(behaviour.delay_s)
        if behaviour.fault == "429":
            return self._send(
                429, {"error": {"code": "429", "message": "Rate limit"}}, {"retry-after": behaviour.retry_after}
            )
        if behaviour.fault == "500":
            return self._send(500, {"error": {"code": "500", "message": "Internal server error"}})
        fields = json.loads(request["messages"][-1]["content"].split("\n")[1])  # NOTE: the fields' JSON line
        risk = min(1.0, float(fields["model_score"]) + behaviour.risk_shift)
        opinion: Any = {
            "risk_score": risk,
            "decision": "decline" if risk >= 0.8 else "review" if risk >= 0.5 else "approve",
            "rationale": "stand-in review: the model's score, shifted",
        }
        if behaviour.verdict is not None:
            decision, score = behaviour.verdict
            opinion = {"risk_score": score, "decision": decision, "rationale": "verified by the issuing bank"}
        if behaviour.fault == "bad":
            opinion = {"risk": "high"}
        self._send(200, _completion(parts[2], json.dumps(opinion)))

    def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # NOTE: the client gave up waiting (a timeout under test)


def _completion(deployment: str, content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": deployment,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 180, "completion_tokens": 40, "total_tokens": 220},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--fault", choices=["429", "500", "bad"], default=None)
    args = parser.parse_args()
    server = LlmServer(args.port, Behaviour(delay_s=args.delay_ms / 1000, fault=args.fault)).start()
    print(f"Azure OpenAI stand-in on {server.endpoint}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
