"""How often the canary's automatic abort trips on a healthy candidate, and how soon on a bad one.

    python -m bench.canary_guard [--runs 200] [--decisions 5000]

Simulated decisions (declines drawn at a share per arm; 10% of users on the candidate) go
through the real rule: shared/fleet/canary.py's arm windows and `verdict`, checked
after every decision as `Routes.observe` does, at the settings' defaults. Prints, per (live, candidate)
decline share, the share of runs that tripped within `--decisions` candidate decisions and the
median candidate decision at which they did. The figures in `verdict`'s docstring.
"""

from __future__ import annotations

import argparse
import random
import statistics

from shared.fleet.canary import DECLINE, Window, verdict
from shared.settings import RolloutPolicy


def first_trip(policy: RolloutPolicy, live: float, candidate: float, decisions: int, seed: int) -> int | None:
    """The candidate decision at which the rule aborts, or None."""
    draw = random.Random(seed)  # noqa: S311 a simulation's draws, reproducible by seed
    arms = {"live": Window(policy.canary_window), "canary": Window(policy.canary_window)}
    seen = 0
    while seen < decisions:
        arm = "canary" if draw.random() < 0.1 else "live"
        seen += arm == "canary"
        share = candidate if arm == "canary" else live
        arms[arm].add(DECLINE if draw.random() < share else 0)
        if verdict(policy, arms["live"], arms["canary"]) is not None:  # the minimum of events included
            return seen
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--decisions", type=int, default=5000)
    args = parser.parse_args()
    policy = RolloutPolicy()
    for live, candidate in ((0.10, 0.10), (0.30, 0.30), (0.02, 0.02), (0.10, 0.17), (0.10, 0.20), (0.10, 0.03)):
        trips = [t for s in range(args.runs) if (t := first_trip(policy, live, candidate, args.decisions, s))]
        median = statistics.median(trips) if trips else None
        print(
            f"live {live:.0%} declines, candidate {candidate:.0%}: tripped in {len(trips) / args.runs:.1%} "
            f"of {args.runs} runs within {args.decisions} candidate decisions; median at decision {median}"
        )


if __name__ == "__main__":
    main()
