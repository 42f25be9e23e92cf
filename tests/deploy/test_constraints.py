"""constraints.txt pins every dependency pyproject.toml declares, at a version it allows: the image
and .ci/run install from it, so a dependency added without `scripts/update-constraints` fails here."""

from __future__ import annotations

import tomllib

from deploy_checks import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def pins() -> dict[str, Version]:
    found: dict[str, Version] = {}
    for raw in (ROOT / "constraints.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and version, f"not an exact pin: {raw!r}"
        key = canonicalize_name(name.split("[")[0])
        assert key not in found, f"pinned twice: {name}"
        found[key] = Version(version)
    return found


def declared() -> list[Requirement]:
    """The project's requirements and every extra's, the self-references (gpu-ledger[aws]) left out."""
    reqs = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in PROJECT["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    return [r for r in reqs if canonicalize_name(r.name) != canonicalize_name(PROJECT["name"])]


#: Never pinned: pip upgrades itself, and the build tools a test extra may declare (``wheel``, for
#: tests/test_example_plugin.py's offline build) are the installer's, not the product's.
INSTALLERS = {"gpu-ledger", "pip", "setuptools", "wheel"}


def test_every_declared_dependency_is_pinned_within_its_specifier() -> None:
    pinned = pins()
    problems = []
    for req in declared():
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if canonicalize_name(req.name) in INSTALLERS:
            continue
        version = pinned.get(canonicalize_name(req.name))
        if version is None:
            problems.append(f"{req}: no pin (run scripts/update-constraints)")
        elif not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req}: pinned {version}, outside the specifier")
    assert problems == []


def test_the_project_itself_and_installers_are_not_pinned() -> None:
    assert not INSTALLERS & set(pins())
