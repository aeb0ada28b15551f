"""The README is an entry point, and what it says holds: its length, its order, its API table (against
the route table), its commands (against the Makefile), its figures (against docs/benchmark.md) and its
costs (against infra/'s defaults). Its links, with docs/'s, are tests/test_docs_links.py's."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.adapters.http.routes import ROUTES, RouteSpec
from shared.domain.events import EXAMPLE_EVENT

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MAX_LINES = 300
SECTIONS = [
    "Prerequisites",
    "The two commands",
    "One request and its answer",
    "Deploy to Azure",
    "The API",
    "Performance",
    "Where to read on",
]
KEYS = {"function": "function key", "admin": "admin key", "anonymous": "anonymous"}  # the route table's auth, in words


def headings(text: str) -> list[str]:
    """The `## ` headings of a markdown text, outside code blocks."""
    found, code = [], False
    for line in text.splitlines():
        code ^= line.startswith("```")
        if not code and line.startswith("## "):
            found.append(line[3:].strip())
    return found


def test_the_readme_is_an_entry_point_in_the_order_a_new_user_needs() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"README.md has {len(text.splitlines())} lines, over {MAX_LINES}"
    assert headings(text) == SECTIONS


def api_rows(text: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(method, path) → (plane, auth) of the README's API table."""
    rows = re.findall(r"^\| `(GET|POST|PUT|DELETE) (/[^`]*)` \| (?:[^|]|\\\|)* \| (\w+) \| ([a-z ]+) \|$", text, re.M)
    return {(method, path): (plane, auth) for method, path, plane, auth in rows}


def expected(route: RouteSpec) -> tuple[str, str]:
    return ("probe" if route.auth == "anonymous" else route.plane), KEYS[route.auth]


def routes_of_the_table() -> dict[tuple[str, str], tuple[str, str]]:
    table: dict[tuple[str, str], tuple[str, str]] = {}
    for route in ROUTES:
        paths = (
            [route.path.replace("{probe}", p) for p in ("live", "ready")] if route.name == "health" else [route.path]
        )
        table |= {(method, path): expected(route) for method in route.methods for path in paths}
    return table


@pytest.mark.parametrize("page", ["README.md", "docs/api.md"])
def test_the_api_table_is_the_route_table_with_plane_and_auth(page: str) -> None:
    assert api_rows((REPO / page).read_text()) == routes_of_the_table()


def test_the_api_table_check_catches_a_wrong_plane_and_a_lost_route() -> None:
    text = README.read_text()
    wrong = text.replace(
        "| `PUT /api/models/{name}/canary` | a share of users scored by a candidate version | admin |",
        "| `PUT /api/models/{name}/canary` | a share | data |",
    )
    assert api_rows(wrong) != routes_of_the_table()
    lost = "\n".join(line for line in text.splitlines() if "`GET /api/stats`" not in line)
    assert api_rows(lost) != routes_of_the_table()


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z0-9-]*):", (REPO / "Makefile").read_text(), re.M))


def test_every_make_command_the_readme_names_is_a_target() -> None:
    named = set(re.findall(r"\bmake (?:[A-Z_]+=\S+ )*([a-z][a-z0-9-]*)", README.read_text()))
    assert named, "no make command found"
    assert named <= make_targets(), named - make_targets()


def test_the_example_event_is_the_one_the_smoke_test_sends() -> None:
    smoke = (REPO / "infra" / "hooks" / "smoke.sh").read_text()
    assert json.loads(re.search(r"^event='(\{.*\})'$", smoke, re.M)[1]) == EXAMPLE_EVENT  # type: ignore[index]
    powershell = (REPO / "infra" / "hooks" / "smoke.ps1").read_text()
    assert json.loads(re.search(r"^\$payment = '(\{.*\})'$", powershell, re.M)[1]) == EXAMPLE_EVENT  # type: ignore[index]


def test_the_performance_figures_are_docs_benchmarks() -> None:
    section = README.read_text().split("## Performance", 1)[1].split("\n## ", 1)[0]
    figures = re.findall(
        r"\d[\d,]*\.?\d*(?: ms| µs|\u00d7)?", "".join(re.findall(r"\|[^|\n]*\|\s*([^|\n]+)\|\n", section))
    )
    benchmark = (REPO / "docs" / "benchmark.md").read_text()
    assert len(figures) >= 8
    assert [f for f in figures if f not in benchmark] == []


def test_the_costs_name_infra_defaults() -> None:
    main = (REPO / "infra" / "main.bicep").read_text()
    section = README.read_text().split("**What it costs at the defaults**", 1)[1].split("\n\n", 2)[1]
    for param, value in [
        ("dedicatedProfileType", "D8"),
        ("serviceBusSku", "Premium"),
        ("serviceBusMessagingUnits", "1"),
        ("redisSku", "Balanced_B5"),
        ("registrySku", "Standard"),
        ("scoringProfile", "dev"),
        ("deployOpenAi", "false"),
    ]:
        assert re.search(rf"^param {param} \w+ = '?{value}'?$", main, re.M), f"infra/main.bicep: {param} is not {value}"
        if param != "scoringProfile":
            assert value in section or value.lower() in section.lower(), f"README's cost table lacks {param}={value}"
    from bench.flashsale.infra import read_profiles

    floor = read_profiles()["dev"]["minReplicas"]  # NOTE: the default profile's floor is what idles
    assert f"`minReplicas` {floor} " in section, f"README's cost table lacks the dev profile's minReplicas {floor}"


def test_the_deploy_settings_the_readme_names_exist() -> None:
    text = README.read_text()
    hooks = "".join(p.read_text() for p in (REPO / "infra" / "hooks").iterdir() if p.is_file())  # not __pycache__
    parameters = (REPO / "infra" / "main.parameters.json").read_text()
    for name in set(re.findall(r"\b(SCORING_[A-Z_]+)\b", text)):
        assert name in hooks or name in parameters, name


@pytest.fixture
def served(tmp_path: Path) -> Iterator[int]:
    """The app as `make run` serves it (the committed model, no Redis), on a free port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {**os.environ, "PYTHONPATH": str(REPO), "PORT": str(port), "REDIS_URL": "", "PREDICTION_LOG": "off"}
    log = (tmp_path / "app.log").open("w")
    app = subprocess.Popen([sys.executable, "-m", "shared"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield port
    finally:
        app.terminate()
        app.wait(timeout=30)
        log.close()


def test_the_one_request_answers_as_the_readme_shows(served: int) -> None:
    """The README's two curl commands, run as written (on another port), answer what it shows."""
    section = README.read_text().split("## One request and its answer", 1)[1]
    commands, shown = re.search(r"```bash\n(.*?)```\n```json\n(.*?)```", section, re.S).groups()  # type: ignore[union-attr]
    script = commands.replace("localhost:7071", f"localhost:{served}")
    ready, score = script.split("\n", 1)
    for _ in range(200):  # NOTE: the first start warms the model (about a second)
        if subprocess.run(["sh", "-c", ready], capture_output=True, text=True).stdout.startswith('{"status":"ready"'):
            break
        time.sleep(0.1)
    done = subprocess.run(["sh", "-c", score], capture_output=True, text=True, timeout=60)
    answer = json.loads(done.stdout)
    expected = json.loads(shown)
    assert set(answer) == set(expected)
    assert {k: v for k, v in answer.items() if k != "timings_ms"} == {
        k: v for k, v in expected.items() if k != "timings_ms"
    }
    assert set(answer["timings_ms"]) == set(expected["timings_ms"])
