"""What the review of the uncertain tail costs `/api/score`: LLM off, healthy, slow, failing.

    python -m bench.review [--rate 300] [--seconds 8] [--rounds 3]

One run, four apps side by side (make run's server, embedded defaults), each driven in turn by the
open-loop generator at the same offered rate, rounds interleaved, medians reported:

    off       AZURE_OPENAI_ENDPOINT unset
    healthy   a local Azure OpenAI stand-in answering in ~50 ms (bench/llm_server.py)
    slow      the stand-in answering in 2 s (past LLM_TIMEOUT_MS: answers go out pending)
    failing   the stand-in answering 500 (the breaker opens after 5 failures in a row)

The band is set from the local scores of the generator's own events so that 20% of them
fall in it; the rate and share caps are lifted so every event in the band is reviewed
(the worst case the caps exist to prevent). Each run sends unique events (no cache hits).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson

from bench.loadgen import event_body, open_loop
from bench.servers import Server, free_port, start_server

ROOT = Path(__file__).resolve().parent.parent
MODES: dict[str, list[str] | None] = {
    "off": None,
    "healthy": ["--delay-ms", "50"],
    "slow": ["--delay-ms", "2000"],
    "failing": ["--fault", "500"],
}


def band_for(share: float, sample: int = 4000) -> tuple[float, float]:
    """The middle `share` of the local scores of the generator's events (scored in process)."""
    from shared.core.wiring import build_service
    from shared.domain.events import decode_event
    from shared.settings import Settings

    async def scores() -> list[float]:
        core = await build_service(Settings(models_dir=str(ROOT / "models"), gc_gen0_threshold=0))
        try:
            done = await core.score_many([decode_event(event_body(n)) for n in range(sample)])
            return sorted(s.risk_score for s in done if not isinstance(s, Exception))
        finally:
            await core.aclose()

    ranked = asyncio.run(scores())
    lo = ranked[int(len(ranked) * (0.5 - share / 2))]
    hi = ranked[int(len(ranked) * (0.5 + share / 2))]
    return lo, hi


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def stats_of(server: Server) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/api/stats", timeout=5) as r:
        reviews = json.loads(r.read())["reviews"]
    return reviews or {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=300.0, help="offered requests/s")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--share", type=float, default=0.2, help="share of events in the band")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out" / "review.json")
    args = parser.parse_args()

    low, high = band_for(args.share)
    print(f"band [{low:.4f}, {high:.4f}] holds {args.share:.0%} of the generator's events", flush=True)
    stand_ins: list[subprocess.Popen[bytes]] = []
    apps: dict[str, Server] = {}
    base = {"PYTHONPATH": str(ROOT), "LOG_LEVEL": "ERROR", "MODELS_DIR": str(ROOT / "models")}
    try:
        for mode, flags in MODES.items():
            env = dict(base)
            if flags is not None:
                port = free_port()
                cmd = [sys.executable, "-m", "bench.llm_server", "--port", str(port), *flags]
                stand_ins.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL))
                env |= {
                    "AZURE_OPENAI_ENDPOINT": f"http://127.0.0.1:{port}",
                    "AZURE_OPENAI_API_KEY": "bench-local",
                    "LLM_BAND_LOW": f"{low:.6f}",
                    "LLM_BAND_HIGH": f"{high:.6f}",
                    "LLM_MAX_RPS": "100000",
                    "LLM_MAX_SHARE": "1",
                }
            apps[mode] = start_server(f"review-{mode}", "shared.adapters.http.asgi:app", env)
        time.sleep(0.5)
        runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        offset = 50_000_000
        for round_no in range(1, args.rounds + 1):
            for mode, server in apps.items():
                offset += 1_000_000
                res = asyncio.run(open_loop(server.port, args.rate, args.seconds, offset=offset))
                lat = res.latencies_ms
                runs[mode].append(
                    {
                        "p50_ms": statistics.median(lat) if lat else float("nan"),
                        "p99_ms": quantile(lat, 0.99),
                        "achieved_rps": res.achieved,
                        "errors": res.errors,
                    }
                )
                print(f"round {round_no} {mode:8s} {runs[mode][-1]}", flush=True)
        summary = {
            mode: {
                **{k: statistics.median(r[k] for r in rs) for k in ("p50_ms", "p99_ms", "achieved_rps")},
                "errors": sum(r["errors"] for r in rs),
                "reviews": stats_of(apps[mode]),
            }
            for mode, rs in runs.items()
        }
    finally:
        for server in apps.values():
            server.stop()
        for proc in stand_ins:
            proc.terminate()
            proc.wait()
    result = {
        "rate": args.rate,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "band": [low, high],
        "summary": summary,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    print(
        f"\n/api/score at {args.rate:.0f} req/s offered, {args.share:.0%} of events in the band, medians of {args.rounds}"
    )
    print("| LLM | p50 ms | p99 ms | achieved req/s | errors | reviews done / pending / failed / skipped |")
    print("|---|---|---|---|---|---|")
    for mode, s in summary.items():
        rv = s["reviews"]
        assert isinstance(rv, dict)
        counts = " / ".join(str(rv.get(k, "-")) for k in ("done", "pending", "failed", "skipped")) if rv else "off"
        print(
            f"| {mode} | {s['p50_ms']:.2f} | {s['p99_ms']:.2f} | {s['achieved_rps']:.0f} | {s['errors']} | {counts} |"
        )


if __name__ == "__main__":
    main()
