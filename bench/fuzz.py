"""`make fuzz`: schemathesis against the served app, generated from the app's own OpenAPI document.

    make fuzz                                      # >= 10,000 requests against a `make run` app
    python -m bench.fuzz --examples 1000 --seed 1 [--url http://127.0.0.1:7071] [--min-requests N]

Unless --url names a running app, it starts one as `make run` does (`python -m shared`, this
environment's settings, a free loopback port; locally no function key is checked) and stops
it at the end. schemathesis loads `/api/openapi.json`, runs its phases (examples: the
document's own; coverage: the edges of every schema, valid and not; fuzzing: up to --examples
generated requests per operation; stateful: chains through the links it infers) with the
checks `not_a_server_error`, `response_schema_conformance`, `content_type_conformance` and
`json_error_bodies` (bench/fuzz_hooks.py, which also counts every request and answer).

It prints, and writes to OUT/fuzz.json: requests sent, answers by status, answers >= 500,
requests with no answer within --request-timeout (hangs, dropped connections), error answers
that are not JSON errors, and schemathesis's failures. Exit 1 unless the last four are 0
and at least --min-requests were sent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.servers import free_port, wait_http

__all__ = ["CHECKS", "Figures", "fuzz", "main", "served_app"]

REPO = Path(__file__).resolve().parent.parent
CHECKS = ("not_a_server_error", "response_schema_conformance", "content_type_conformance", "json_error_bodies")


@dataclass
class Figures:
    """What one run found."""

    command: str
    seconds: float
    requests: int
    statuses: dict[str, int]
    operations: dict[str, dict[str, int]]  # per operation: answers by class ("2xx", "4xx", "5xx"), "none"
    server_errors: int  # answers >= 500
    unanswered: int  # no answer within the request timeout (a hang), or the connection dropped
    not_json_errors: int  # answers >= 400 that are not a JSON error
    test_cases: int
    failures: int  # schemathesis's unique failures (any check), and its errors
    errors: int
    slowest_s: float
    examples: list[str] = field(default_factory=list)

    def ok(self, min_requests: int = 0) -> bool:
        bad = self.server_errors + self.unanswered + self.not_json_errors + self.failures + self.errors
        return bad == 0 and self.requests >= min_requests

    def summary(self) -> str:
        by_class: dict[str, int] = {}
        for status, n in self.statuses.items():
            by_class[status[0] + "xx"] = by_class.get(status[0] + "xx", 0) + n
        lines = [
            f"requests sent             {self.requests:,} in {self.seconds:.0f} s ({self.test_cases:,} test cases)",
            f"answers by class          {', '.join(f'{k} {v:,}' for k, v in sorted(by_class.items()))}",
            f"answers by status         {', '.join(f'{k} {v:,}' for k, v in self.statuses.items())}",
            f"answers >= 500            {self.server_errors}",
            f"no answer (hang, drop)    {self.unanswered}",
            f"4xx not a JSON error      {self.not_json_errors}",
            f"schemathesis failures     {self.failures} (errors {self.errors})",
            f"slowest answer            {self.slowest_s * 1000:.0f} ms",
        ]
        return "\n".join(lines + [f"  e.g. {e}" for e in self.examples])

    def table(self) -> str:
        """Requests and answers per operation, as a Markdown table (docs/reliability.md)."""
        rows = ["| operation | requests | 2xx | 4xx | ≥ 500 | no answer |", "|---|---|---|---|---|---|"]
        for label, c in self.operations.items():
            total = sum(c.values())
            rows.append(
                f"| `{label}` | {total:,} | {c.get('2xx', 0):,} | {c.get('4xx', 0):,} | {c.get('5xx', 0)} | {c.get('none', 0)} |"
            )
        return "\n".join(rows)


@contextmanager
def served_app(env: dict[str, str] | None = None) -> Iterator[str]:
    """`python -m shared` (what `make run` starts) on a free loopback port; its base URL."""
    port = free_port()
    environ = {**os.environ, **(env or {}), "PORT": str(port), "PYTHONPATH": str(REPO)}
    log = open(os.devnull, "wb")  # noqa: SIM115 - closed with the process below
    process = subprocess.Popen([sys.executable, "-m", "shared"], cwd=REPO, env=environ, stdout=log, stderr=log)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/api/health/ready", timeout_s=60)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def fuzz(
    url: str,
    out: Path,
    *,
    examples: int,
    seed: int = 1,
    workers: int = 1,
    request_timeout_s: float = 10.0,
    phases: str = "examples,coverage,fuzzing,stateful",
    document: Path | None = None,
    only: str | None = None,
) -> Figures:
    """Run schemathesis once against the app at `url`; its reports go to `out`.

    `document`: a file to generate from instead of the app's own (a test's mutant);
    `only`: the operationId of the one operation to test.
    """
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    counts_file, report = out / "counts.json", out / "schemathesis.json"
    counts_file.unlink(missing_ok=True)
    location = [str(document.resolve()), "--url", url] if document else [f"{url}/api/openapi.json"]
    config = out / "schemathesis.toml"
    config.write_text("[cache]\nenabled = false\n")  # NOTE: no crash files left behind; each run stands alone
    args = [
        "--config-file",
        str(config),
        "run",
        *location,
        *(["--include-operation-id", only] if only else []),
        "--checks",
        ",".join(CHECKS),
        "--max-examples",
        str(examples),
        "--seed",
        str(seed),
        "--workers",
        str(workers),
        "--request-timeout",
        str(request_timeout_s),
        "--phases",
        phases,
        "--suppress-health-check",
        "all",
        "--no-color",
        "--generation-database",
        "none",
        "--report",
        "json",
        "--report-json-path",
        str(report),
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "bench.fuzz_hooks", "FUZZ_COUNTS": str(counts_file)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-c", "from schemathesis.cli import schemathesis; schemathesis()", *args]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    (out / "schemathesis.log").write_text(done.stdout + done.stderr)
    if not counts_file.exists() or not report.exists():
        raise RuntimeError(f"schemathesis did not finish ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return _figures(json.loads(counts_file.read_text()), json.loads(report.read_text()), seconds, args)


def _figures(counts: dict[str, Any], report: dict[str, Any], seconds: float, args: list[str]) -> Figures:
    statuses: dict[str, int] = counts["statuses"]
    cases = report["test_cases"]
    found = [f"{f.get('label', '')}: {f.get('title', '')}" for f in report.get("failures", [])]
    found += [str(e)[:300] for e in report.get("errors", [])]
    return Figures(
        command="schemathesis " + " ".join(args),
        seconds=round(seconds, 1),
        requests=sum(statuses.values()) + counts["unanswered"],
        statuses=statuses,
        operations=counts["operations"],
        server_errors=sum(n for status, n in statuses.items() if int(status) >= 500),
        unanswered=counts["unanswered"],
        not_json_errors=counts["not_json_errors"],
        test_cases=cases["generated"],
        failures=cases["unique_failures"],
        errors=cases["errored"] + len(report.get("errors", [])),
        slowest_s=counts["slowest_s"],
        examples=(counts["unanswered_examples"] + counts["not_json_examples"] + found)[:20],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running app (default: start one as `make run` does)")
    parser.add_argument("--examples", type=int, default=1000, help="generated requests per operation (fuzzing)")
    parser.add_argument("--min-requests", type=int, default=10_000, help="fail if fewer requests were sent")
    parser.add_argument("--seed", type=int, default=1)
    # NOTE: one worker: with threads, hypothesis's lambda descriptions call ast.parse concurrently,
    # which CPython 3.11 does not survive ("AST constructor recursion depth mismatch").
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--request-timeout", type=float, default=10.0, help="seconds; no answer by then is a hang")
    parser.add_argument("--phases", default="examples,coverage,fuzzing,stateful")
    parser.add_argument("--out", type=Path, default=REPO / "bench-out" / "fuzz")
    args = parser.parse_args(argv)

    def run(url: str) -> Figures:
        return fuzz(
            url,
            args.out,
            examples=args.examples,
            seed=args.seed,
            workers=args.workers,
            request_timeout_s=args.request_timeout,
            phases=args.phases,
        )

    if args.url:
        figures = run(args.url.rstrip("/"))
    else:
        with served_app() as url:
            figures = run(url)
    (args.out / "fuzz.json").write_text(json.dumps(asdict(figures), indent=2))
    print(figures.summary())
    (args.out / "fuzz.md").write_text(figures.table() + "\n")
    print(f"reports: {args.out}/ (schemathesis.log, schemathesis.json, fuzz.json, fuzz.md: per operation)")
    if not figures.ok(args.min_requests):
        print(f"FAILED: see the figures above (at least {args.min_requests:,} requests, 0 of the rest)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
