"""Do the pins resolve to wheels on every laptop we support? Asked of the package index; nothing is installed.

    .venv/bin/python scripts/check_platforms.py                 # every platform below: each pin has a wheel
    .venv/bin/python scripts/check_platforms.py macos-arm64     # one platform
    .venv/bin/python scripts/check_platforms.py --resolve       # and the whole dependency tree, as pip resolves it

For each platform, requirements.txt's pins whose markers hold there are evaluated here for that
platform (pip evaluates a requirement file's markers for the machine it runs on, not for
`--platform`). By default each such pin must have a wheel on the index (PEP 691 JSON, one page a
project) whose tags a CPython 3.11 on that platform takes and whose Requires-Python admits 3.11:
a few seconds, what `make test` runs (tests/test_requirements.py). `--resolve` also resolves the
dependencies, with `pip install --dry-run --only-binary=:all: --platform ... --python-version 3.11
--target <tmp>` (pip download's resolver, nothing installed): minutes, as it fetches wheels.
Exit 0 when every platform resolves, 1 when one does not (naming the pin), 3 when the index cannot
be reached (nothing was checked).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags, mac_platforms
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
PYTHON = "3.11"  # the Functions image's Python, and the one `make run` asks for
INDEX = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")


@dataclass(frozen=True)
class Platform:
    """A target: the wheel platform tags pip may take there, and the marker values of such a machine."""

    name: str
    tags: tuple[str, ...]
    sys_platform: str
    machine: str

    def markers(self) -> dict[str, str]:
        system = {"linux": "Linux", "darwin": "Darwin", "win32": "Windows"}[self.sys_platform]
        return {
            "sys_platform": self.sys_platform,
            "platform_system": system,
            "platform_machine": self.machine,
            "os_name": "nt" if self.sys_platform == "win32" else "posix",
            "python_version": PYTHON,
            "python_full_version": f"{PYTHON}.0",
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
        }

    def wheel_tags(self) -> frozenset[Tag]:
        """Every tag a CPython 3.11 here installs (cp311, abi3, py3-none-any, ...)."""
        version = tuple(int(part) for part in PYTHON.split("."))
        return frozenset([*cpython_tags(version, platforms=self.tags), *compatible_tags(version, "cp311", self.tags)])


def manylinux(arch: str, glibc_minor: int = 28) -> tuple[str, ...]:
    """Every manylinux tag a glibc 2.`glibc_minor` machine takes (pip takes only the tags it is given)."""
    legacy = {"manylinux_2_5": "manylinux1", "manylinux_2_12": "manylinux2010", "manylinux_2_17": "manylinux2014"}
    tags: list[str] = []
    for minor in range(glibc_minor, 4, -1):
        tags.append(f"manylinux_2_{minor}_{arch}")
        if f"manylinux_2_{minor}" in legacy and (arch == "x86_64" or minor >= 17):
            tags.append(f"{legacy[f'manylinux_2_{minor}']}_{arch}")
    return tuple(tags)


PLATFORMS = (
    Platform("linux-x86_64", manylinux("x86_64"), "linux", "x86_64"),  # the image; CI
    Platform("linux-arm64", manylinux("aarch64"), "linux", "aarch64"),
    Platform("macos-arm64", tuple(mac_platforms((14, 0), "arm64")), "darwin", "arm64"),
    Platform("macos-x86_64", tuple(mac_platforms((13, 0), "x86_64")), "darwin", "x86_64"),
    Platform("windows-x86_64", ("win_amd64",), "win32", "AMD64"),  # the deploy hooks' publish only
)


class Unreachable(Exception):
    """The package index did not answer."""


def pins_for(platform: Platform, requirements: Path) -> list[Requirement]:
    """The requirements that apply on `platform`, markers dropped (`-r` files followed)."""
    kept: list[Requirement] = []
    for raw in requirements.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-r "):
            kept += pins_for(platform, requirements.parent / line[3:].strip())
            continue
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate(platform.markers()):
            requirement.marker = None
            kept.append(requirement)
    return kept


def files_of(project: str) -> list[dict[str, object]]:
    """The project's files on the index (PEP 691 JSON)."""
    url = f"{INDEX}/{canonicalize_name(project)}/"
    if not url.startswith(("https://", "http://")):
        raise Unreachable(f"{url}: not an http(s) index")
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 (checked above: http(s) only)
            files: list[dict[str, object]] = json.load(answer)["files"]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise Unreachable(f"{url}: HTTP {exc.code}") from exc
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise Unreachable(f"{url}: {exc}") from exc
    return files


def missing_wheel(pin: Requirement, platform: Platform, files: list[dict[str, object]]) -> str | None:
    """Why `pin` has no wheel a CPython 3.11 on `platform` installs; None when it has one."""
    accepted, python = platform.wheel_tags(), Version(f"{PYTHON}.0")
    for item in files:
        filename = str(item["filename"])
        if not filename.endswith(".whl") or item.get("yanked"):
            continue
        try:
            _, version, _, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:  # NOTE: old uploads the index still lists (`py36+`); pip skips them too
            continue
        requires = item.get("requires-python")
        if version in pin.specifier and tags & accepted and (not requires or python in SpecifierSet(str(requires))):
            return None
    return f"{pin}: no wheel for CPython {PYTHON} on {platform.name}"


def check_wheels(platforms: list[Platform], requirements: Path) -> dict[str, list[str]]:
    """Per platform, the pins without a wheel there (one index page per project, fetched once)."""
    wanted = {p.name: pins_for(p, requirements) for p in platforms}
    projects = sorted({pin.name for pins in wanted.values() for pin in pins})
    with ThreadPoolExecutor(8) as pool:  # NOTE: the index answers each page in ~0.1 s; 40 pages at once
        pages = dict(zip(projects, pool.map(files_of, projects), strict=True))
    by_platform = {p.name: p for p in platforms}
    return {
        name: [why for pin in pins if (why := missing_wheel(pin, by_platform[name], pages[pin.name])) is not None]
        for name, pins in wanted.items()
    }


def resolve(platform: Platform, pins: list[Requirement], timeout_s: float) -> str | None:
    """pip's error resolving the whole tree of `pins` as binary wheels for `platform`; None when it resolves."""
    with tempfile.TemporaryDirectory() as tmp:
        listed = Path(tmp) / "requirements.txt"
        listed.write_text("\n".join(str(pin) for pin in pins) + "\n")
        tags = [arg for tag in platform.tags for arg in ("--platform", tag)]
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        command += ["--disable-pip-version-check", "--only-binary=:all:", *tags, "--python-version", PYTHON]
        command += ["--implementation", "cp", "--target", str(Path(tmp) / "t"), "-r", str(listed)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)  # noqa: S603 (fixed argv)
    if done.returncode == 0:
        return None
    said = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("WARNING: Location"))
    if any(needle in said for needle in ("Max retries exceeded", "NewConnectionError", "Temporary failure")):
        raise Unreachable(said)
    return said.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("platforms", nargs="*", metavar="platform", help=", ".join(p.name for p in PLATFORMS))
    parser.add_argument("--requirements", type=Path, default=REPO / "requirements.txt")
    parser.add_argument("--resolve", action="store_true", help="the dependency tree too, through pip (minutes)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per platform (--resolve)")
    args = parser.parse_args(argv)
    unknown = set(args.platforms) - {p.name for p in PLATFORMS}
    if unknown:
        parser.error(f"unknown platform(s) {sorted(unknown)}")
    chosen = [p for p in PLATFORMS if not args.platforms or p.name in args.platforms]
    try:
        problems = check_wheels(chosen, args.requirements)
        if args.resolve:
            for platform in chosen:
                said = resolve(platform, pins_for(platform, args.requirements), args.timeout)
                problems[platform.name] += [said] if said else []
    except Unreachable as exc:
        print(f"check-platforms: the package index cannot be reached; nothing was checked ({exc})", file=sys.stderr)
        return 3
    for platform in chosen:
        found = problems[platform.name]
        print(f"{platform.name:15} " + ("resolves" if not found else "DOES NOT RESOLVE: " + "; ".join(found)))
    return 1 if any(problems.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
