"""The flash sale, simulated: `run` the scenarios, or size a deployment with `capacity`.

    python -m bench.flashsale run [--scenario all|steady|step|ramp|diurnal] [--path all|http-single|...]
                                  [--peak 10000] [--burst 3] [--p99-ms 50] [--out bench-out/flashsale]
    python -m bench.flashsale capacity --peak 10000 --burst 3 --p99-ms 50 [--path http-single]
                                  [--max-refused 0.001] [--out bench-out/flashsale]      (make capacity)

What-ifs: `run` takes --min-replicas, --max-replicas, --http-concurrent-requests and
--queue-messages-per-replica instead of infra/'s; both take --replica-start-s and --node-start-s
("MEDIAN[,P99]" seconds) instead of the PROVISIONAL start-up delays.

Inputs: infra/ and host.json (bench/flashsale/infra.py), bench/flashsale/measured.json (measured;
`python -m bench.flashsale.measure` rewrites it) and the PROVISIONAL figures (bench/flashsale/inputs.py).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from bench.flashsale import capacity, report
from bench.flashsale.arrivals import SCENARIOS
from bench.flashsale.fleet import PATHS, Run, simulate
from bench.flashsale.infra import read_scale_rules
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
    rules = read_scale_rules()
    changed = {name: getattr(args, name) for name in OVERRIDES if getattr(args, name) is not None}
    rules = rules.with_(**changed)
    label = "infra/ as it is" if not changed else "infra/ with " + ", ".join(f"{k}={v}" for k, v in changed.items())
    times = service_times(load_measured())
    scenarios = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    paths = list(PATHS) if args.path == "all" else [args.path]
    runs: list[Run] = []
    for name in scenarios:
        scenario = SCENARIOS[name](args.peak, args.burst)
        step_s = 15.0 if name == "diurnal" else 1.0
        for path in paths:
            runs.append(simulate(scenario, path, rules, times, _provisional(args), step_s=step_s))
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


def _capacity(args: argparse.Namespace) -> None:
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
        state = "hold" if found.holds else "do NOT hold (not even with the floor at the ceiling)"
        print(f"\nthe rules the simulation sized {state} it:")
        print(report.summary_table([found.recommended], args.p99_ms))
        print()
        print(report.minutes_table(found.recommended))
        runs["recommended"] = found.recommended
    image = report.plot(runs, args.p99_ms, args.out / f"capacity-{found.path}.png", found.scenario.describe)
    print(f"\nplot: {image}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "capacity"):
        one = sub.add_parser(name)
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
    sub.choices["capacity"].add_argument("--path", default="http-single", choices=PATHS)
    sub.choices["capacity"].add_argument("--max-refused", type=float, default=0.001)
    args = parser.parse_args()
    (_run if args.command == "run" else _capacity)(args)


if __name__ == "__main__":
    main()
