"""Instructions per request, counted by valgrind: a measure this noisy shared machine cannot move.

    .venv/bin/python -m bench.instructions [--path hit|miss|batch] [--telemetry on|off|both] [--tree DIR]
    .venv/bin/python -m bench.instructions --rollouts [off,log,shadow] [--tree DIR]
    .venv/bin/python -m bench.instructions --served [echo,hit-off,hit-on,miss-off,miss-on] [--tree DIR]

The app (`create_app`, embedded defaults, TRACE_SAMPLE_RATIO=0) is built, warmed, and sent N
requests through its ASGI interface in groups of 8, under `valgrind --tool=cachegrind`, which
counts the instructions the CPU executes whatever else runs (identical runs agree to ~1-3%).
The figure is (I(N=10,000) - I(N=2,000)) / 8,000: the start-up and warm-up cancel. `--tree`
counts another checkout's code (a git worktree of the commit to compare) on this venv.
PYTHONHASHSEED is fixed. The hit path is deterministic; the miss path goes through the
micro-batcher, whose batches depend on timing, so its counts move more. `--path batch` sends
`/api/score/batch` requests of 64 unique events (N events) and counts per event. ~3 min per figure.

`--rollouts` counts the miss path on wrk's events (bench/wrk/score.lua's amounts, countries and
channels: ~10% review and decline, whose records the log's writer explains) with nothing on
(`off`), with the prediction log (a directory, every decision: `log`), and with the log and a
shadow version (`shadow`); the writer runs on the same loop, so its work is in the count (each
child waits past the flush interval before it exits). Telemetry stays on, as `make run` has it.
These run under `valgrind --tool=callgrind --separate-threads=yes`: the figure is the loop's
thread (what serves requests), with all threads beside it, since the shadow's and the reason
codes' model runs go to a worker thread (ONNX Runtime releases the GIL). ~5 min per figure.

`--served` counts the whole server process instead: uvicorn (uvloop + httptools, as `make run`
serves) under cachegrind, the app with its production settings (GC tuning, and with telemetry
on, metrics and 1% of requests traced through an installed OpenTelemetry SDK), or the raw ASGI
echo (the ceiling `make bench` divides by); requests sent one after another on one keep-alive
connection, so a miss takes the lone request's batcher path. (I(N=4,000) - I(N=1,000)) / 3,000:
start-up, warm-up and shutdown cancel. The ratio echo ÷ hit is the share of the ceiling a hit
could reach with the CPU to itself. ~2 min per count.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COUNTS = (2_000, 10_000)


async def drive(telemetry: bool, path: str, count: int, rollouts: str | None = None) -> None:
    from bench.inprocess import batch_body, call, cpu_per_request
    from bench.loadgen import event_body
    from shared.adapters.http.app import create_app
    from shared.core.holder import ServiceHolder
    from shared.settings import Settings

    if rollouts is not None:
        await drive_rollouts(rollouts, count)
        os._exit(0)
    holder = ServiceHolder(lambda: Settings(gc_gen0_threshold=0, telemetry=telemetry, trace_sample_ratio=0.0))
    app = create_app(holder)
    await holder.get()
    hits = [event_body(n) for n in range(200)]
    for body in hits:
        await call(app, body)
    if path == "batch":  # NOTE: `count` events, 64 a request
        await cpu_per_request(app, [batch_body(1_000_000 + n) for n in range(0, count, 64)], "/api/score/batch")
        os._exit(0)
    bodies = (
        [hits[n % len(hits)] for n in range(count)]
        if path == "hit"
        else [event_body(1_000_000 + n) for n in range(count)]
    )
    await cpu_per_request(app, bodies)
    os._exit(0)  # NOTE: no teardown counted


async def drive_rollouts(variant: str, count: int) -> None:
    """The miss path on wrk's events with nothing on, the log, or the log and a shadow version."""
    import dataclasses
    import tempfile

    from bench.inprocess import call, cpu_per_request, wrk_event
    from bench.rollouts import models_dir
    from shared.adapters.http.app import create_app
    from shared.core.holder import ServiceHolder
    from shared.settings import PredictionLogPolicy, Settings

    work = Path(tempfile.mkdtemp(prefix="instructions-rollouts-"))
    settings = Settings(gc_gen0_threshold=0, trace_sample_ratio=0.0, models_dir=str(models_dir(work / "models")))
    if variant != "off":
        policy = PredictionLogPolicy(sink="dir", directory=str(work / "log"))
        settings = dataclasses.replace(settings, prediction_log=policy)
    holder = ServiceHolder(lambda: settings)
    app = create_app(holder)
    core = await holder.get()
    if variant == "shadow":
        await core.admin.set_shadow("fraud", "1")
    for n in range(200):  # NOTE: warm-up, on numbers the counted events never take
        await call(app, wrk_event(16 * (1_000_000 + n)))
    await asyncio.sleep(1.2)
    await cpu_per_request(app, [wrk_event(16 * n) for n in range(count)])
    await asyncio.sleep(1.2)  # NOTE: past the writer's flush interval: the records written are counted
    stats = core.stats().prediction_log
    print(f"written {getattr(stats, 'written', 0)} buffered {getattr(stats, 'buffered', 0)}", flush=True)


CACHEGRIND = ("valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null")


def counted(tree: Path, telemetry: bool, path: str, count: int, rollouts: str | None = None) -> int:
    """Instructions of one child run under cachegrind."""
    command = [*CACHEGRIND, sys.executable, "-m", "bench.instructions", "--child", str(count), "--path", path,
               "--telemetry", "on" if telemetry else "off"]  # fmt: skip
    if rollouts is not None:
        command += ["--rollouts", rollouts]
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(tree)}
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    return instructions(done.stderr)


CALLGRIND = ("valgrind", "--tool=callgrind", "--separate-threads=yes", "--dump-instr=no", "--compress-strings=no")


def counted_by_thread(tree: Path, count: int, rollouts: str) -> tuple[int, int]:
    """Instructions of one rollouts child under callgrind: (the event loop's thread, all threads).

    NOTE: the loop's thread is what serves requests; a worker thread's model run (ONNX Runtime
    releases the GIL) runs beside it on another core, so the two are reported apart."""
    with tempfile.TemporaryDirectory(prefix="instructions-") as out:
        command = [*CALLGRIND, f"--callgrind-out-file={out}/cg.out", sys.executable, "-m", "bench.instructions",
                   "--child", str(count), "--path", "miss", "--telemetry", "on", "--rollouts", rollouts]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(tree)}
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
        totals = {path.name: _totals(path) for path in Path(out).glob("cg.out*")}
    if not totals:
        raise RuntimeError(f"valgrind wrote no counts:\n{done.stderr[-2000:]}")
    loop = totals.get("cg.out-01", 0)  # NOTE: thread 1 is the main thread: asyncio.run's loop
    return loop, sum(totals.values())


def _totals(path: Path) -> int:
    found = re.search(r"^(?:totals|summary):\s+(\d+)", path.read_text(errors="replace"), re.MULTILINE)
    return int(found[1]) if found else 0


def instructions(stderr: str) -> int:
    """The total cachegrind printed."""
    found = re.search(r"I\s+refs:\s+([\d,]+)", stderr)
    if found is None:
        raise RuntimeError(f"valgrind printed no count:\n{stderr[-2000:]}")
    return int(found[1].replace(",", ""))


def per_unit(count: Callable[[int], int], counts: tuple[int, int]) -> float:
    """Instructions per request (or event): the difference of two runs over their difference in N."""
    low, high = (count(n) for n in counts)
    return (high - low) / (counts[1] - counts[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", choices=["hit", "miss", "batch"], default="hit")
    parser.add_argument("--telemetry", choices=["on", "off", "both"], default="both")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose code is counted")
    parser.add_argument("--rollouts", nargs="?", const="off,log,shadow", help="off, log, shadow (comma-separated)")
    parser.add_argument("--served", nargs="?", const=",".join(SERVED), help=", ".join(SERVED) + " (comma-separated)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        asyncio.run(drive(args.telemetry == "on", args.path, args.child, args.rollouts))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    if args.rollouts is not None:
        rollouts(args.tree.resolve(), args.rollouts.split(","))
        return
    if args.served is not None:
        served(args.tree.resolve(), args.served.split(","))
        return
    figures = {}
    unit = "event" if args.path == "batch" else "request"
    for mode in ("off", "on") if args.telemetry == "both" else (args.telemetry,):
        figures[mode] = per_unit(partial(counted, args.tree.resolve(), mode == "on", args.path), COUNTS)
        print(f"{args.path}, telemetry {mode}: {figures[mode]:,.0f} instructions per {unit} ({args.tree})", flush=True)
    if len(figures) == 2:
        print(f"telemetry's cost: +{figures['on'] - figures['off']:,.0f} ({figures['on'] / figures['off'] - 1:.1%})")


SERVED = {  # variant -> (ASGI target, path, extra environment)
    "echo": ("bench.ceiling:raw_app", "hit", {}),
    "hit-off": ("shared.adapters.http.asgi:app", "hit", {"TELEMETRY": "false"}),
    "hit-on": ("shared.adapters.http.asgi:app", "hit", {"TELEMETRY": "true"}),
    "hit-untraced": ("shared.adapters.http.asgi:app", "hit", {"TELEMETRY": "true", "TRACE_SAMPLE_RATIO": "0"}),
    "miss-off": ("shared.adapters.http.asgi:app", "miss", {"TELEMETRY": "false"}),
    "miss-on": ("shared.adapters.http.asgi:app", "miss", {"TELEMETRY": "true"}),
}
SERVED_COUNTS = (1_000, 4_000)


def served_count(tree: Path, variant: str, count: int) -> int:
    """Instructions of a whole uvicorn process (start, `count` requests after a warm-up, shutdown)."""
    return instructions(serve(tree, variant, count, CACHEGRIND)[1])


def serve(tree: Path, variant: str, count: int, under: Sequence[str] = ()) -> tuple[int, str]:
    """Serve `variant` under `under` (a command prefix), send it 200 warm-up requests and `count`
    more, one after another on one connection, then stop it with SIGINT: (exit status, stderr)."""
    import http.client
    import signal

    from bench.loadgen import event_body
    from bench.servers import free_port, server_command, wait_http

    target, path, extra = SERVED[variant]
    port = free_port()
    command = [*under, *server_command(target, port)]
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(tree), "REDIS_URL": "", "LOG_LEVEL": "WARNING"}
    server = subprocess.Popen(
        command, cwd=tree, env={**env, **extra}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_http(f"http://127.0.0.1:{port}{'/' if variant == 'echo' else '/api/health/live'}", 300)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        hits = [event_body(n) for n in range(200)]
        misses = (event_body(10**6 + n) for n in range(count))
        for body in [*hits, *((hits[n % 200] for n in range(count)) if path == "hit" else misses)]:
            connection.request("POST", "/api/score", body, {"content-type": "application/json"})
            answer = connection.getresponse()
            answer.read()
            if answer.status != 200:
                raise RuntimeError(f"{variant}: /api/score answered {answer.status}")
        connection.close()
    finally:
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=300)
    return server.returncode, stderr


def served(tree: Path, variants: list[str]) -> None:
    figures: dict[str, float] = {}
    for variant in variants:
        if variant not in SERVED:
            sys.exit(f"--served: {variant!r} is none of {', '.join(SERVED)}")
        figures[variant] = per_unit(partial(served_count, tree, variant), SERVED_COUNTS)
        print(f"served, {variant}: {figures[variant]:,.0f} instructions per request ({tree})", flush=True)
    for path in ("hit", "miss"):
        off, on = figures.get(f"{path}-off"), figures.get(f"{path}-on")
        if off and on:
            print(
                f"{path}: telemetry's cost +{on - off:,.0f} ({on / off - 1:.1%}); req/s on the CPU alone {off / on:.3f}x"
            )
        served_path = on or off
        if "echo" in figures and served_path:
            print(f"{path}: echo ÷ {path} (telemetry {'on' if on else 'off'}) = {figures['echo'] / served_path:.3f}")


def rollouts(tree: Path, variants: list[str]) -> None:
    figures: dict[str, float] = {}
    for variant in variants:
        if variant not in ("off", "log", "shadow"):
            sys.exit(f"--rollouts: {variant!r} is none of off, log, shadow")
        low, high = (counted_by_thread(tree, n, variant) for n in COUNTS)
        loop, every = ((high[i] - low[i]) / (COUNTS[1] - COUNTS[0]) for i in (0, 1))
        figures[variant] = loop
        cost = f" (+{loop / figures['off'] - 1:.1%} on off)" if "off" in figures and variant != "off" else ""
        print(f"miss, rollouts {variant}: {loop:,.0f} instructions per request on the loop's thread{cost}, "
              f"{every:,.0f} in all threads ({tree})", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
