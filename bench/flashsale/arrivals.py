"""Offered load over time: the four shapes a flash sale is judged on.

Each scenario is a rate (events/s) as a function of time (s), plus its length. The fleet
simulation steps through it; within a step the arrivals are Poisson at that rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["SCENARIOS", "Scenario", "diurnal", "ramp", "sale_day", "steady", "step"]


@dataclass(frozen=True)
class Scenario:
    """A named offered rate over `seconds`."""

    name: str
    seconds: float
    rate: Callable[[float], float]
    describe: str
    burst: tuple[float, float] | None = None  # a sale known in advance: when its burst starts and ends (s)


def steady(peak: float, minutes: float = 60) -> Scenario:
    """`peak` events/s throughout."""
    return Scenario("steady", minutes * 60, lambda t: peak, f"{peak:,.0f}/s for {minutes:.0f} min")


def step(
    peak: float, burst: float = 3.0, *, before_min: float = 5, rise_s: float = 60, hold_min: float = 10
) -> Scenario:
    """`peak`, then `burst` x `peak` reached linearly within `rise_s`, held `hold_min`, then `peak` again.

    The flash sale: the seeds' "3x within a minute, for 10 minutes"."""
    start, top_end = before_min * 60, before_min * 60 + rise_s + hold_min * 60

    def rate(t: float) -> float:
        if t < start or t >= top_end:
            return peak
        return peak * (1 + (burst - 1) * min(1.0, (t - start) / rise_s))

    return Scenario(
        "step",
        top_end + 5 * 60,
        rate,
        f"{peak:,.0f}/s, to {burst:g}x within {rise_s:.0f} s at minute {before_min:g}, held {hold_min:g} min",
        burst=(start, top_end),
    )


def sale_day(peak: float, burst: float = 3.0, *, at_h: float = 16.0, hold_min: float = 10) -> Scenario:
    """A diurnal day (peak at 16:00) with the flash sale on top: `burst` x the hour's rate, reached
    within a minute at `at_h`, held `hold_min` minutes. What the fleets' replica-hours are counted on."""
    day = diurnal(peak)
    start, end = at_h * 3600, at_h * 3600 + 60 + hold_min * 60

    def rate(t: float) -> float:
        if t < start or t >= end:
            return day.rate(t)
        return day.rate(t) * (1 + (burst - 1) * min(1.0, (t - start) / 60))

    return Scenario(
        "sale_day",
        day.seconds,
        rate,
        f"{day.describe}, {burst:g}x for {hold_min:g} min at {at_h:g}:00",
        burst=(start, end),
    )


def ramp(peak: float, burst: float = 3.0, *, minutes: float = 30) -> Scenario:
    """From `peak` to `burst` x `peak` linearly over `minutes`."""
    seconds = minutes * 60
    return Scenario(
        "ramp",
        seconds,
        lambda t: peak * (1 + (burst - 1) * t / seconds),
        f"{peak:,.0f}/s to {burst * peak:,.0f}/s linearly over {minutes:g} min",
    )


def diurnal(peak: float, *, trough: float = 0.15, hours: float = 24) -> Scenario:
    """A day: a cosine from `trough` x `peak` at 04:00 to `peak` at 16:00."""
    seconds = hours * 3600

    def rate(t: float) -> float:
        phase = (t / 3600 - 4) / 24 * 2 * math.pi
        return peak * (trough + (1 - trough) * (1 - math.cos(phase)) / 2)

    return Scenario("diurnal", seconds, rate, f"a day from {trough * peak:,.0f}/s (04:00) to {peak:,.0f}/s (16:00)")


SCENARIOS: dict[str, Callable[[float, float], Scenario]] = {
    "steady": lambda peak, burst: steady(peak),
    "step": lambda peak, burst: step(peak, burst),
    "ramp": lambda peak, burst: ramp(peak, burst),
    "diurnal": lambda peak, burst: diurnal(peak),
}
