"""The production hop, measured: the app driven through the real worker runtime.

    python -m bench.worker [--rounds 3] [--singles 3000] [--batches 20] [--per-message N] [--profile]

A stand-in host (tests/worker/host.py) drives `function_app.py` through `azure_functions_runtime`
(Python 3.13, .venv-worker; `make worker-venvs`) over the host's gRPC messages, as in
production. It reports, medians over `--rounds` fresh worker processes:

- `score`: single-event invocations per second (8 in flight, every event a cache miss) and the
  worker process's CPU per invocation (/proc: user + system, over the measured invocations);
- `score_batch`: HTTP invocations of 64 events each (2 in flight), events/s and worker CPU per event;
- `payments`: batches of 64 messages, one at a time (the host runs one batch at a time per
  replica), events per second, worker CPU per event and milliseconds per batch.

Each round runs the floor first: the same functions with empty bodies (bench/worker_floor/: a
constant answer; the queue function only reads each body), through the same runtime, then the
app; every figure is also reported as a ratio to its floor within the round (the median of the
rounds' ratios), which is what carries across machines:

- `score`: the app's CPU per invocation / the floor's (target <= 1.25);
- `score_batch`: the app's CPU per event / the floor's per event (target <= 1.6);
- `payments`: the app's CPU per event / ONE empty single-event invocation (target <= 0.25): what
  a queued event costs against what an HTTP one cannot go below. `--per-message N` packs N events
  in each message (docs/queue.md, "Several events in one message").

Every event is dated when it is sent, and each phase of the app counts its verdicts
(bench/verdicts.py): `score` and `score_batch` from each answer (a 200 with a decision is
`completed`), `payments` from what the queue path published (`risk-completed` or `risk-rejected`
with its code). A phase where under 99.9 % of its events were scored raises `WorkNotDone` and
nothing is reported: it would have timed rejections (issue 53). The floor's phases count only that
each invocation succeeded.

The stand-in host shares the machine's cores with the worker: invocations/s is a floor, CPU
per invocation is the figure that carries over. `--profile` records the app's worker with py-spy
during each phase of the first round (bench-out/worker-<phase>.txt, collapsed stacks).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.loadgen import event_body, now_stamp
from bench.servers import free_port
from bench.verdicts import Verdicts, WorkNotDone, batch_verdicts, http_verdict, published_verdicts
from tests.worker.host import REPO, Host, running_worker

FLOOR = REPO / "bench" / "worker_floor"  # the same functions, empty bodies
WARM = 1_000_000  # the warm-up's event numbers: apart from the measured ones (a repeat is a cache hit or a conflict)
EVENT_AGE_S = [0.0]  # --event-age-s: how old the events are when sent (0: dated now); tests age them


def stamp() -> str:
    return now_stamp(EVENT_AGE_S[0])


def cpu_s(pid: int) -> float:
    """CPU seconds a process's threads have run so far (Linux /proc: each live thread's
    `schedstat`, in nanoseconds; the clock-tick `stat` counters are 10 ms coarse)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # NOTE: a thread that ended between the listing and the read
    return total / 1e9


def loop_cpu_s(pid: int) -> float:
    """CPU seconds of the process's main thread, the one that runs the worker's event loop (the
    app's code and the runtime's dispatch); the rest is the gRPC threads'."""
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0]) / 1e9


def drive(
    count: int, in_flight: int, send: Callable[[int], Any], judge: Callable[[Any], list[str]] | None = None
) -> tuple[float, Verdicts]:
    """`count` invocations, `in_flight` at a time: the wall seconds they took, and the verdicts
    `judge` read from each response (none when it is None)."""
    slots = threading.Semaphore(in_flight)
    futures = []
    started = time.perf_counter()
    for n in range(count):
        slots.acquire()
        future = send(n)
        future.add_done_callback(lambda _: slots.release())
        futures.append(future)
    responses = [future.result(60) for future in futures]
    seconds = time.perf_counter() - started
    verdicts = Verdicts("invocations")
    for response in responses:
        if response.result.status != 1:  # StatusResult.Success
            raise RuntimeError(f"an invocation failed: {response.result.exception.message}")
        if judge is not None:
            verdicts.update(judge(response))
    return seconds, verdicts


def _http(response: Any) -> tuple[int, bytes]:
    http = response.return_value.http
    kind = http.body.WhichOneof("data")
    data = getattr(http.body, kind) if kind else b""
    return int(http.status_code or 200), data if isinstance(data, bytes) else data.encode()


def judge_single(response: Any) -> list[str]:
    return [http_verdict(*_http(response))]


def judge_batch(response: Any) -> list[str]:
    return batch_verdicts(*_http(response))


def checked(verdicts: Verdicts, phase: str, app: bool) -> dict[str, int]:
    """The phase's verdict counts, after refusing a phase of the app whose events were not scored."""
    verdicts.phase = phase
    if app:
        verdicts.require("completed")
    return verdicts.as_dict()


def singles(host: Host, pid: int, count: int, tag: str, app: bool = True, in_flight: int = 8) -> dict[str, Any]:
    def send(n: int) -> Any:
        body = event_body(n, timestamp=stamp()).replace(b'"event_id":"', f'"event_id":"{tag}-'.encode(), 1)
        return host.invoke_async("score", host.http("score", "POST", "/api/score", body))

    drive(200, in_flight, lambda n: send(WARM + n))  # NOTE: warm on other events: a measured one is never a repeat
    before, loop_before = cpu_s(pid), loop_cpu_s(pid)
    seconds, verdicts = drive(count, in_flight, send, judge_single if app else None)
    used, loop_used = cpu_s(pid) - before, loop_cpu_s(pid) - loop_before
    return {
        "verdicts": checked(verdicts, "score", app),
        "invocations_per_s": count / seconds,
        "cpu_us_per_invocation": used / count * 1e6,
        "loop_cpu_us_per_invocation": loop_used / count * 1e6,  # the event loop's thread alone
    }


def http_batches(host: Host, pid: int, count: int, tag: str, size: int = 64, app: bool = True) -> dict[str, Any]:
    """`score_batch` invocations of `size` events each, 2 in flight."""

    def send(n: int) -> Any:
        events = [
            event_body(500_000 + n * size + i, timestamp=stamp()).replace(
                b'"event_id":"', f'"event_id":"{tag}-h{n}-'.encode(), 1
            )
            for i in range(size)
        ]
        body = b'{"events":[' + b",".join(events) + b"]}"
        return host.invoke_async("score_batch", host.http("score_batch", "POST", "/api/score/batch", body))

    drive(5, 2, lambda n: send(WARM + n))
    before = cpu_s(pid)
    seconds, verdicts = drive(count, 2, send, judge_batch if app else None)
    used = cpu_s(pid) - before
    return {
        "verdicts": checked(verdicts, "score_batch_64", app),
        "events_per_s": count * size / seconds,
        "cpu_us_per_event": used / (count * size) * 1e6,
    }


def batches(host: Host, pid: int, count: int, tag: str, size: int = 64, per_message: int = 1) -> dict[str, Any]:
    """`payments` invocations of `size` messages each, one at a time; `per_message` events in each
    message (more than one: an envelope, `{"events": [...]}`). Its verdicts are read from what the
    worker published, once it has stopped (`one_side`)."""

    def body(n: int, i: int) -> bytes:
        events = [
            event_body(250_000 + (n * size + i) * per_message + j, timestamp=stamp()).replace(
                b'"event_id":"', f'"event_id":"{tag}-b{n}-{i}-'.encode(), 1
            )
            for j in range(per_message)
        ]
        return events[0] if per_message == 1 else b'{"events":[' + b",".join(events) + b"]}"

    def send(n: int) -> Any:
        inputs, metadata = host.batch([(f"{tag}-{n}-{i}", body(n, i)) for i in range(size)])
        return host.invoke_async("payments", inputs, metadata)

    drive(3, 1, lambda n: send(WARM + n))
    before = cpu_s(pid)
    seconds, _ = drive(count, 1, send)
    used = cpu_s(pid) - before
    events = count * size * per_message
    return {
        "events_sent": (3 + count) * size * per_message,  # the warm-up's batches too: all publish
        "events_per_s": events / seconds,
        "cpu_us_per_event": used / events * 1e6,
        "cpu_us_per_message": used / (count * size) * 1e6,
        "ms_per_batch": seconds / count * 1000,
    }


def grpc_doors(target: str, key: str, pid: int, count: int, tag: str) -> dict[str, Any]:
    """The event gRPC doors on the app's own port (never through the host): `Score` calls, 8 in
    flight; one `ScoreStream`, 16 events in flight, one event a message; the same stream, 16 events
    a message. Worker CPU per event (the whole process: no host stands in front of this door)."""
    from bench import doors  # NOTE: the gRPC client and the generated stubs: only when measuring these doors

    def bodies(phase: str, n: int) -> list[bytes]:
        return [
            event_body(n + i, timestamp=stamp()).replace(b'"event_id":"', f'"event_id":"{tag}-{phase}-'.encode(), 1)
            for i in range(count)
        ]

    runs: list[tuple[str, Callable[[list[bytes]], tuple[float, Verdicts]]]] = [
        ("grpc_unary", lambda b: doors.unary(target, key, b, 8)),
        ("grpc_stream_1", lambda b: doors.stream(target, key, b, 16, 1)),
        ("grpc_stream_16", lambda b: doors.stream(target, key, b, 16, 16)),
    ]
    result: dict[str, Any] = {}
    for k, (phase, run) in enumerate(runs):
        run(bodies(f"w{phase}", WARM + k * 10 * count)[:200])
        measured = bodies(phase, 2_000_000 + k * 10 * count)
        before, loop_before = cpu_s(pid), loop_cpu_s(pid)
        seconds, verdicts = run(measured)
        used, loop_used = cpu_s(pid) - before, loop_cpu_s(pid) - loop_before
        result[phase] = {
            "verdicts": checked(verdicts, phase, True),
            "events_per_s": count / seconds,
            "cpu_us_per_event": used / count * 1e6,
            "loop_cpu_us_per_event": loop_used / count * 1e6,
        }
    return result


def profile(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes] | None:
    if shutil.which("py-spy") is None and not (REPO / ".venv" / "bin" / "py-spy").exists():
        return None
    spy = shutil.which("py-spy") or str(REPO / ".venv" / "bin" / "py-spy")
    return subprocess.Popen(
        [
            spy,
            "record",
            "-p",
            str(pid),
            "-d",
            str(int(seconds)),
            "-r",
            "200",
            "-f",
            "raw",
            "-o",
            str(out),
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def one_side(
    args: argparse.Namespace, app_dir: Path, tag: str, env: dict[str, str], spy_out: Path | None
) -> dict[str, Any]:
    """The three figures of one app (the app or its floor) in a fresh worker."""
    result: dict[str, Any] = {}
    app = app_dir == REPO  # NOTE: the floor publishes nothing and decides nothing
    report = Path(tempfile.mkdtemp()) / "report.json"
    with running_worker(
        {**env, "AzureWebJobsScriptRoot": str(app_dir)}, memory_publisher=app, report=report if app else None
    ) as (host, worker):
        init = host.start(app_dir)
        if init.result.status != 1:
            raise RuntimeError(init.result.exception.message)
        for _ in range(600):  # NOTE: the warm-up loads the models right after indexing
            if host.call("health", "GET", "/api/health/ready", params={"probe": "ready"}).status == 200:
                break
            time.sleep(0.05)
        phases: list[tuple[str, Callable[[], dict[str, float]]]] = [
            ("score", lambda: singles(host, worker.pid, args.singles, tag, app)),
            ("score_batch_64", lambda: http_batches(host, worker.pid, args.batches * 10, tag, app=app)),
            ("payments_64", lambda: batches(host, worker.pid, args.batches, tag, per_message=args.per_message)),
        ]
        for phase, run in phases:
            spy = profile(worker.pid, 6, spy_out / f"worker-{phase}.txt") if spy_out is not None else None
            result[phase] = run()
            if spy is not None:
                spy.wait()
        if app and args.doors:
            result.update(grpc_doors(f"127.0.0.1:{env['GRPC_PORT']}", env["GRPC_KEYS"], worker.pid, args.singles, tag))
    if app:
        result["payments_64"]["verdicts"] = queue_verdicts(report, result["payments_64"].pop("events_sent"))
    else:
        result["payments_64"].pop("events_sent")
    return result


def queue_verdicts(report: Path, sent: int) -> dict[str, int]:
    """The `payments` phase's verdicts from what the worker published (its report, written as it
    stopped); an event with no published verdict at all counts as `unanswered`."""
    if not report.exists():
        raise WorkNotDone("payments_64: the worker wrote no report: its verdicts are unknown; not reported")
    verdicts = Verdicts("payments_64")
    verdicts.counts.update(published_verdicts(json.loads(report.read_text())["published"]))
    verdicts.add("unanswered", max(0, sent - verdicts.total))
    verdicts.require("completed")
    return verdicts.as_dict()


def ratios(floor: dict[str, Any], app: dict[str, Any]) -> dict[str, float]:
    """The app's worker CPU against its floor's, measured in the same round."""
    single = floor["score"]["cpu_us_per_invocation"]
    return {
        "score": app["score"]["cpu_us_per_invocation"] / single,
        "score_batch_per_event": app["score_batch_64"]["cpu_us_per_event"]
        / floor["score_batch_64"]["cpu_us_per_event"],
        "payments_per_event_vs_one_invocation": app["payments_64"]["cpu_us_per_event"] / single,
        "payments_per_message_vs_floor": app["payments_64"]["cpu_us_per_message"]
        / floor["payments_64"]["cpu_us_per_message"],
    }


def one_round(args: argparse.Namespace, round_no: int, env: dict[str, str], out: Path) -> dict[str, Any]:
    floor = one_side(args, FLOOR, f"f{round_no}", env, None)
    spy_out = out if args.profile and round_no == 1 else None
    app = one_side(args, REPO, f"r{round_no}", env, spy_out)
    return {"floor": floor, "app": app, "ratio": ratios(floor, app)}


def medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each figure over the rounds, nested as each round is (verdicts: summed)."""
    first = rounds[0]
    if isinstance(first, dict):
        return {
            k: (_summed([r[k] for r in rounds]) if k == "verdicts" else medians([r[k] for r in rounds])) for k in first
        }
    return statistics.median(rounds)


def _summed(counts: list[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for one in counts:
        for k, n in one.items():
            total[k] = total.get(k, 0) + n
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--singles", type=int, default=3000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--per-message", type=int, default=1, help="events in each queued message (an envelope past 1)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--doors", action="store_true", help="also the event gRPC doors (unary, stream) on the app's own port"
    )
    parser.add_argument(
        "--event-age-s", type=float, default=0.0, help="date the events this far in the past (a stale producer)"
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench-out")
    args = parser.parse_args()
    EVENT_AGE_S[0] = args.event_age_s
    args.out.mkdir(parents=True, exist_ok=True)
    models = Path(tempfile.mkdtemp()) / "models"
    shutil.copytree(REPO / "models", models)
    base = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}  # NOTE: in-process features on every side
    env = {"MODELS_DIR": str(models), "FUNCTIONS_WORKER_RUNTIME": "python", "GRPC_PORT": str(free_port())}
    env["GRPC_KEYS"] = secrets.token_urlsafe(16)  # the port binds every address: a key is required
    os.environ.clear()
    os.environ.update(base)
    rounds = []
    load_before = os.getloadavg()[0]
    for n in range(1, args.rounds + 1):
        rounds.append(one_round(args, n, env, args.out))
        print(json.dumps({"round": n, **rounds[-1]}), flush=True)
    summary = medians(rounds)
    summary["machine"] = {"cores": os.cpu_count(), "load_avg_1m_before": load_before,
                          "load_avg_1m_after": os.getloadavg()[0], "per_message": args.per_message}  # fmt: skip
    (args.out / "worker.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
