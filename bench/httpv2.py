"""HTTP streams (HttpV2) against the classic HTTP door, for `score`, through the real worker runtime.

    python -m bench.httpv2 [--rounds 3] [--singles 3000] [--profile]

Needs the extension in .venv-worker (`.venv-worker/bin/pip install -r requirements-worker-httpv2.txt`).
Four sides, each in a fresh worker (Python 3.13, `azure_functions_runtime`, tests/worker/proxy.py)
driven by the stand-in host (tests/worker/host.py), one after the other in each round, their
order turned round every other round:

- classic floor: bench/worker_floor (`score` answers a constant; the request comes as an RpcHttp);
- HttpV2 floor: bench/httpv2_app/floor (the same, through the extension's server);
- classic app: function_app.py's `score` (bench/worker.py `singles`, as `python -m bench.worker` runs it);
- HttpV2 app: bench/httpv2_app's `score`, the same ASGI app handed the server's request.

Each: `--singles` single-event `score` invocations, 8 in flight, every event a cache miss, after
200 warm-up ones; the worker process's CPU per invocation (all threads, and the loop's thread
alone), invocations/s, the worker's resident memory gained per 1,000 invocations, and the
verdicts of the app's answers (bench/verdicts.py: a phase whose events were not scored is
refused, not reported). The figures are the medians of the rounds, ratios taken within a round.

The verdict: HttpV2 is adopted if it cuts the worker's CPU per `score` invocation by >= 25 %
(issue 56). Keys, the throttle, the host's telemetry and the HTTP scale rule stay the host's
in both doors: the host forwards only an invocation it has admitted and authorised
(Azure/azure-functions-host 89dc438, src/WebJobs.Script.WebHost/: WebJobsApplicationBuilderExtension.cs:90-96
puts HttpThrottleMiddleware before FunctionInvocationMiddleware, whose :117-146 checks the key before
ExecuteAsync, and the worker channel starts forwarding from there: tests/worker/host.py `Forwarder`).

NOT MEASURED (provisional): the real host's CPU. Classic, the host marshals the request into the
InvocationRequest; HttpV2, it forwards the request over HTTP/1.1 with YARP, copies the answer
back, and still sends an (empty) InvocationRequest and awaits the InvocationResponse.
`stand_in_host_cpu_us_per_invocation` is this process's own CPU (the Python stand-in host and
the load generator together), reported as a hint of the direction only: it is not .NET's cost.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.loadgen import event_body
from bench.servers import free_port
from bench.verdicts import http_verdict
from bench.worker import FLOOR, WARM, checked, cpu_s, drive, loop_cpu_s, medians, profile, singles, stamp
from tests.worker.host import REPO, Host, running_worker

HTTPV2_APP = REPO / "bench" / "httpv2_app"
HTTPV2_FLOOR = HTTPV2_APP / "floor"
SIDES = {  # name -> (app directory, is the app: its answers are judged)
    "classic_floor": (FLOOR, False),
    "httpv2_floor": (HTTPV2_FLOOR, False),
    "classic_app": (REPO, True),
    "httpv2_app": (HTTPV2_APP, True),
}
BAR = 0.25  # issue 56: adopted if it cuts the worker CPU per `score` invocation by at least this


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def judge_forwarded(forwarded: Any) -> list[str]:
    """The verdict of the answer the worker's server sent (host.Forwarded)."""
    return [http_verdict(forwarded.answer.status, forwarded.answer.body)]


def forwarded_singles(host: Host, pid: int, count: int, tag: str, app: bool, in_flight: int = 8) -> dict[str, Any]:
    """bench/worker.py `singles`, through HTTP streams: each invocation forwarded (`Host.forward_async`);
    `in_flight` as `singles` (8) unless a run probes how the figure moves with the rate."""

    def send(n: int) -> Any:
        body = event_body(n, timestamp=stamp()).replace(b'"event_id":"', f'"event_id":"{tag}-'.encode(), 1)
        return host.forward_async("score", "POST", "/api/score", body)

    drive(200, in_flight, lambda n: send(WARM + n))  # NOTE: warm on other events: a measured one is never a repeat
    before, loop_before = cpu_s(pid), loop_cpu_s(pid)
    seconds, verdicts = drive(count, in_flight, send, judge_forwarded if app else None)
    used, loop_used = cpu_s(pid) - before, loop_cpu_s(pid) - loop_before
    return {
        "verdicts": checked(verdicts, "score", app),
        "invocations_per_s": count / seconds,
        "cpu_us_per_invocation": used / count * 1e6,
        "loop_cpu_us_per_invocation": loop_used / count * 1e6,
    }


@contextmanager
def ready_worker(app_dir: Path, app: bool, env: dict[str, str]) -> Iterator[tuple[Host, int]]:
    """A fresh worker on `app_dir`, indexed, loaded and answering its readiness probe."""
    with running_worker({**env, "AzureWebJobsScriptRoot": str(app_dir)}, memory_publisher=app) as (host, worker):
        init = host.start(app_dir)
        if init.result.status != 1:
            raise RuntimeError(init.result.exception.message)
        httpv2 = app_dir in (HTTPV2_APP, HTTPV2_FLOOR)
        if httpv2 != (host.forwarder is not None):
            raise RuntimeError(f"{app_dir}: HttpUri advertised: {host.forwarder is not None}, expected {httpv2}")
        for _ in range(600):  # NOTE: the warm-up loads the models right after indexing
            if host.call("health", "GET", "/api/health/ready", params={"probe": "ready"}).status == 200:
                break
            time.sleep(0.05)
        yield host, worker.pid


def one_side(name: str, args: argparse.Namespace, tag: str, env: dict[str, str], spy: Path | None) -> dict[str, Any]:
    app_dir, app = SIDES[name]
    run: Callable[[Host, int], dict[str, Any]] = (
        (lambda h, pid: forwarded_singles(h, pid, args.singles, tag, app, args.httpv2_in_flight))
        if name.startswith("httpv2")
        else (lambda h, pid: singles(h, pid, args.singles, tag, app))
    )
    with ready_worker(app_dir, app, env) as (host, pid):
        recording = profile(pid, 6, spy / f"httpv2-{name}.txt") if spy is not None else None
        rss, host_cpu = rss_kb(pid), time.process_time()
        result = run(host, pid)
        measured = args.singles + 200
        result["stand_in_host_cpu_us_per_invocation"] = (time.process_time() - host_cpu) / measured * 1e6
        result["rss_kb_per_1k_invocations"] = (rss_kb(pid) - rss) / measured * 1000
        if recording is not None:
            recording.wait()
    return result


def one_round(args: argparse.Namespace, n: int, env: dict[str, str]) -> dict[str, Any]:
    order = list(SIDES) if n % 2 else [*reversed(list(SIDES))]  # NOTE: interleaved: drift falls on both doors
    spy = args.out if args.profile and n == 1 else None
    sides = {name: one_side(name, args, f"{name[:2]}{name[-3:]}{n}", env, spy) for name in order}
    classic, httpv2 = sides["classic_app"], sides["httpv2_app"]
    cf, hf = sides["classic_floor"], sides["httpv2_floor"]
    cpu = "cpu_us_per_invocation"
    return {
        **{name: sides[name] for name in SIDES},
        "ratio": {
            "httpv2_vs_classic": httpv2[cpu] / classic[cpu],  # the figure the bar reads
            "httpv2_vs_classic_loop": httpv2[f"loop_{cpu}"] / classic[f"loop_{cpu}"],
            "httpv2_floor_vs_classic_floor": hf[cpu] / cf[cpu],
            "app_over_floor_classic_us": classic[cpu] - cf[cpu],
            "app_over_floor_httpv2_us": httpv2[cpu] - hf[cpu],
            "classic_vs_floor": classic[cpu] / cf[cpu],
            "httpv2_vs_floor": httpv2[cpu] / hf[cpu],
        },
    }


def verdict(summary: dict[str, Any]) -> dict[str, Any]:
    cut = 1 - summary["ratio"]["httpv2_vs_classic"]
    return {
        "worker_cpu_cut": cut,
        "bar": BAR,
        "adopted": cut >= BAR,
        "host_share": "not measured (the real host's forwarding CPU): provisional",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--singles", type=int, default=3000)
    parser.add_argument("--profile", action="store_true", help="py-spy each side of round 1 (bench-out/httpv2-*.txt)")
    parser.add_argument(
        "--httpv2-in-flight", type=int, default=8, help="HttpV2 invocations in flight (classic: 8, as bench.worker)"
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench-out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    models = Path(tempfile.mkdtemp()) / "models"
    shutil.copytree(REPO / "models", models)
    os.environ.pop("REDIS_URL", None)  # NOTE: in-process features on every side, as bench.worker
    env = {"MODELS_DIR": str(models), "FUNCTIONS_WORKER_RUNTIME": "python", "GRPC_PORT": str(free_port())}
    env["GRPC_KEYS"] = secrets.token_urlsafe(16)  # the app's gRPC port binds every address: a key is required
    load_before = os.getloadavg()[0]
    rounds = []
    for n in range(1, args.rounds + 1):
        rounds.append(one_round(args, n, env))
        print(json.dumps({"round": n, **rounds[-1]}), flush=True)
    summary = medians(rounds)
    summary["verdict"] = verdict(summary)
    summary["machine"] = {"cores": os.cpu_count(), "load_avg_1m_before": load_before,
                          "load_avg_1m_after": os.getloadavg()[0], "singles": args.singles,
                          "httpv2_in_flight": args.httpv2_in_flight}  # fmt: skip
    (args.out / "httpv2.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
