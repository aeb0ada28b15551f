"""The flash sale, simulated: `run` the scenarios, size a deployment with `capacity`, `cost` the fleets.

    python -m bench.flashsale run [--profile dev|sale] [--fleet scheduled|floor|reactive]
                                  [--scenario all|steady|step|ramp|diurnal] [--path all|http-single|...]
                                  [--peak 10000] [--burst 3] [--p99-ms 50] [--out bench-out/flashsale]
    python -m bench.flashsale capacity --peak 10000 --burst 3 --p99-ms 50 [--path http-single]
                                  [--max-refused 0.001] [--out bench-out/flashsale]
    python -m bench.flashsale capacity --profile sale [--write]     (make capacity: the profile, azd lines)
    python -m bench.flashsale cost [--profile sale]                 (replica-hours a day, three fleets)
    python -m bench.flashsale doors                                 (each door's CPU, host share, knee, p99 there)

`--profile`: which of infra/'s profiles (main.bicep `var profiles`; default: the one azd deploys,
main.parameters.json's SCORING_PROFILE default). `--fleet` (run): how a sale known in advance is
met: "scheduled" (the profile's floor and the calendar's cron window), "floor" (saleReplicas all
day), "reactive" (the scale rules alone).

What-ifs: `run` takes --min-replicas, --max-replicas, --http-concurrent-requests and
--queue-messages-per-replica instead of infra/'s; both take --replica-start-s and --node-start-s
("MEDIAN[,P99]" seconds) instead of the PROVISIONAL start-up delays.

Inputs: infra/ and host.json (bench/flashsale/infra.py), bench/flashsale/measured.json (measured;
`python -m bench.flashsale.measure` rewrites it) and the PROVISIONAL figures (bench/flashsale/inputs.py).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from bench.flashsale import capacity, report
from bench.flashsale.arrivals import SCENARIOS, sale_day
from bench.flashsale.fleet import FLEETS, HOSTLESS, PATHS, ReplicaWindows, Run, admission_rule, simulate
from bench.flashsale.infra import read_profiles, read_scale_rules
from bench.flashsale.inputs import PROVISIONAL, Provisional, Spread, load_measured, service_times

REPO = Path(__file__).resolve().parents[2]


OVERRIDES = ("min_replicas", "max_replicas", "http_concurrent_requests", "queue_messages_per_replica")


def _provisional(args: argparse.Namespace) -> Provisional:
    """PROVISIONAL, with the start-up delays a what-if names ("median,p99" seconds)."""

    def spread(value: str | None, default: Spread) -> Spread:
        if value is None:
            return default
        median, _, p99 = value.partition(",")
        return Spread(float(median), float(p99 or median))

    return replace(
        PROVISIONAL,
        replica_start_s=spread(args.replica_start_s, PROVISIONAL.replica_start_s),
        node_start_s=spread(args.node_start_s, PROVISIONAL.node_start_s),
    )


def _run(args: argparse.Namespace) -> None:
    rules = read_scale_rules(profile=args.profile)
    changed = {name: getattr(args, name) for name in OVERRIDES if getattr(args, name) is not None}
    rules = rules.with_(**changed)
    label = f"infra/ profile {rules.profile}, fleet {args.fleet}" + (
        "" if not changed else " with " + ", ".join(f"{k}={v}" for k, v in changed.items())
    )
    times = service_times(load_measured())
    scenarios = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    paths = list(PATHS) if args.path == "all" else [args.path]
    runs: list[Run] = []
    for name in scenarios:
        scenario = SCENARIOS[name](args.peak, args.burst)
        step_s = 15.0 if name == "diurnal" else 1.0
        for path in paths:
            runs.append(simulate(scenario, path, rules, times, _provisional(args), step_s=step_s, fleet=args.fleet))
        print(f"\n{scenario.name}: {scenario.describe}", flush=True)
        if len(paths) == 1:
            print(report.minutes_table(runs[-1], every=60 if name == "diurnal" else 1))
        image = report.plot(
            {r.path: r for r in runs[-len(paths) :]},
            args.p99_ms,
            args.out / f"{name}.png",
            f"{scenario.describe}, {label}",
        )
        print(f"plot: {image}")
    print()
    print(report.summary_table(runs, args.p99_ms))


def _profile(args: argparse.Namespace) -> None:
    """`make capacity`: the sale profile from the measured figures, against main.bicep's; the azd lines."""
    rules = read_scale_rules(profile=args.profile)
    times = service_times(load_measured())
    doors = tuple(args.doors.split(",")) if args.doors else PATHS
    unknown = set(doors) - set(PATHS)
    if unknown:
        raise SystemExit(f"--doors: {', '.join(sorted(unknown))} is no path; the paths are {', '.join(PATHS)}")
    found = capacity.size_profile(
        args.peak, args.burst, rules, times, _provisional(args), p99_ms=args.p99_ms, doors=doors
    )
    declared = read_profiles()[args.profile]
    print(f"profile {args.profile}: {args.peak:,.0f}/s, {args.burst:g}x within a minute; p99 <= {args.p99_ms:g} ms "
          f"(HTTP, gRPC), <= {capacity.QUEUE_P99_MS:g} ms (queue, enqueue to published); held on {', '.join(doors)}\n")  # fmt: skip
    print("| figure | main.bicep | computed |\n|---|---:|---:|")
    for name, value in asdict(found).items():
        mark = "" if declared.get(name) == value else " **(differs)**"
        print(f"| {name} | {declared.get(name, '-')} | {value}{mark} |")
    if args.write:
        write_profile(args.profile, found)
        print(f"\nwrote profile {args.profile} into infra/main.bicep")
    print("\nTo deploy it:\n")
    print(f"azd env set SCORING_PROFILE {args.profile}")
    print("# a sale known in advance (local times, an IANA zone; opens saleLeadMinutes before the burst):")
    print(
        "azd env set SCORING_SALE_CALENDAR "
        f'\'[{{"start": "2026-12-11T08:{60 - found.saleLeadMinutes:02d}", "end": "2026-12-11T11:00", '
        f'"timezone": "Europe/London", "replicas": {found.saleReplicas}}}]\''
        if found.saleLeadMinutes < 60
        else ""
    )
    print("azd up")


def write_profile(name: str, profile: capacity.Profile, root: Path = REPO) -> None:
    """Rewrite one profile's block in main.bicep's `var profiles` with `profile`'s figures."""
    path = root / "infra" / "main.bicep"
    text = path.read_text()
    block = re.search(rf"^var profiles = \{{\n(?:.*\n)*?^  {name}: \{{\n((?:    .*\n)*?)^  \}}", text, re.MULTILINE)
    if block is None:
        raise SystemExit(f"profile {name} not found in {path}")
    body = "".join(f"    {key}: {value}\n" for key, value in asdict(profile).items())
    path.write_text(text[: block.start(1)] + body + text[block.end(1) :])


def _cost(args: argparse.Namespace) -> None:
    """Replica-hours a day for the three fleets, on a diurnal day with the sale at 16:00."""
    rules = read_scale_rules(profile=args.profile)
    times = service_times(load_measured())
    provisional = _provisional(args)
    day = sale_day(args.peak, args.burst)
    runs = [
        simulate(day, path, rules, times, provisional, step_s=5.0, fleet=fleet)
        for path in args.paths.split(",")
        for fleet in FLEETS
    ]
    print(f"{day.describe}; profile {rules.profile}\n")
    print(report.cost_table(runs, provisional.node_hour_usd, rules.replicas_per_node, args.p99_ms))


DOORS = (  # (path, bench.worker's phase, what it is)
    ("http-single", "score", "classic HTTP `score` through the Functions host"),
    ("grpc-unary", "grpc_unary", "event gRPC `Score`, unary (the app's own port)"),
    ("grpc-stream", "grpc_stream_16", "event gRPC `ScoreStream`, 16 events a message"),
)


def _doors(args: argparse.Namespace) -> None:
    """Each door a single event can take: the worker's CPU per event (measured), the host's share
    (PROVISIONAL where the door passes the host), one replica's knee and the p99 at it (simulated)."""
    rules = read_scale_rules(profile=args.profile)
    measured = load_measured()
    times = service_times(measured)
    provisional = _provisional(args)
    windows = ReplicaWindows(times, admission_rule(rules), seed=11)
    worker = measured["worker"]
    print(f"worker figures: {measured.get('worker_measured', {}).get('command', measured['command'])}, "
          f"{measured.get('worker_measured', {}).get('date', measured['date'])}; target p99 <= {args.p99_ms:g} ms, "
          f"refused <= {args.max_refused:.2%}\n")  # fmt: skip
    print("| door | worker CPU per event | host's CPU per event | knee of one replica (events/s) | p99 at the knee |")
    print("|---|---:|---:|---:|---:|")
    for path, phase, what in DOORS:
        if phase not in worker:
            print(f"| {what} | not measured (`python -m bench.flashsale.measure --worker-only 3`) | | | |")
            continue
        figures = worker[phase]
        cpu = figures.get("cpu_us_per_invocation", figures.get("cpu_us_per_event", 0.0))
        host = (
            "none (never passes it)" if path in HOSTLESS else f"~{cpu * provisional.host_cpu_ratio:,.0f} µs PROVISIONAL"
        )
        knee = capacity.knee(path, windows, args.p99_ms, args.max_refused)
        _, latencies = windows.at(path, knee)
        p99 = float(np.quantile(latencies, 0.99)) if latencies.size else float("nan")
        print(f"| {what} | {cpu:,.0f} µs | {host} | {knee:,.0f} | {p99:.1f} ms |")


def _capacity(args: argparse.Namespace) -> None:
    if args.profile is not None:
        _profile(args)
        return
    rules = read_scale_rules()
    times = service_times(load_measured())
    found = capacity.size(
        args.path, args.peak, args.burst, args.p99_ms, rules, times, _provisional(args), max_refused=args.max_refused
    )
    print(
        f"{found.scenario.describe}; path {found.path}; target p99 <= {args.p99_ms:g} ms, refused <= {args.max_refused:.2%}"
    )
    print(f"one replica's knee: {found.knee:,.0f} events/s within the target")
    print()
    print(report.rules_table(rules, found.rules))
    print()
    verdict = "holds" if found.current.holds(args.p99_ms, args.max_refused) else "does NOT hold"
    print(f"infra/ as it is {verdict} the target:")
    print(report.summary_table([found.current], args.p99_ms))
    runs = {"infra/ as it is": found.current}
    if found.recommended is not None:
        state = "hold it" if found.holds else "do NOT hold it, not even with the floor at the ceiling"
        print(f"\nthe rules the simulation sized {state}:")
        print(report.summary_table([found.recommended], args.p99_ms))
        print()
        print(report.minutes_table(found.recommended))
        runs["recommended"] = found.recommended
    image = report.plot(runs, args.p99_ms, args.out / f"capacity-{found.path}.png", found.scenario.describe)
    print(f"\nplot: {image}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "capacity", "cost", "doors"):
        one = sub.add_parser(name)
        one.add_argument("--profile", default=None, help="an infra/ profile (default: the one azd deploys)")
        one.add_argument("--peak", type=float, default=10_000, help="events/s before the burst")
        one.add_argument("--burst", type=float, default=3.0, help="the burst's multiple of the peak")
        one.add_argument("--p99-ms", type=float, default=50.0)
        one.add_argument("--out", type=Path, default=REPO / "bench-out" / "flashsale")
        for delay in ("replica-start-s", "node-start-s"):  # NOTE: what-ifs of the PROVISIONAL start-up delays
            one.add_argument("--" + delay, metavar="MEDIAN[,P99]")
    sub.choices["run"].add_argument("--scenario", default="all", choices=["all", *SCENARIOS])
    sub.choices["run"].add_argument("--path", default="all", choices=["all", *PATHS])
    for name in OVERRIDES:  # NOTE: what-ifs: a value instead of infra/'s
        sub.choices["run"].add_argument("--" + name.replace("_", "-"), type=int)
    sub.choices["capacity"].add_argument("--path", default="http-single", choices=[*PATHS, "grpc-unary"])
    for name in ("capacity", "doors"):
        sub.choices[name].add_argument("--max-refused", type=float, default=0.001)
    sub.choices["capacity"].add_argument("--write", action="store_true", help="write the profile into main.bicep")
    sub.choices["capacity"].add_argument(
        "--doors", help="with --profile: the paths the traffic takes (default: all); e.g. grpc-stream,servicebus"
    )
    sub.choices["run"].add_argument("--fleet", default="scheduled", choices=FLEETS)
    sub.choices["cost"].add_argument("--paths", default="http-single,servicebus")
    args = parser.parse_args()
    {"run": _run, "capacity": _capacity, "cost": _cost, "doors": _doors}[args.command](args)


if __name__ == "__main__":
    main()
