"""Run DRF's own ``tests/test_throttling.py`` against django_gcra's throttle classes.

DRF's source distribution is downloaded at test time with ``pip download`` (never copied
into this repository). Its ``tests/`` tree is extracted as shipped; in
``test_throttling.py`` only the four throttle names are substituted, imported from
``django_gcra.throttling``. Settings are DRF's own (its ``conftest.py``) plus, through
the ``drf_settings_plugin`` pytest plugin, ``django_gcra`` in ``INSTALLED_APPS``, a
django-redis cache on a real redis-server, and a limiter timeout generous enough for a
loaded machine. The suite runs in a subprocess; its JUnit XML gives the outcome of each
test.

``DJANGO_GCRA_DRF_SDIST=/path/djangorestframework-X.tar.gz`` uses a local sdist instead
of downloading one (offline runs).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import rest_framework

# The DRF releases whose suite's expected failures are checked: the newest for Django 5.2,
# the newest that still supports Django 4.2. The suite fetched is the installed release's.
VERIFIED_VERSIONS = ("3.18.3", "3.17.2")
DRF_VERSION = rest_framework.VERSION
SUBSTITUTIONS = {
    "UserRateThrottle": "GCRAUserRateThrottle",
    "AnonRateThrottle": "GCRAAnonRateThrottle",
    "ScopedRateThrottle": "GCRAScopedRateThrottle",
    "SimpleRateThrottle": "GCRARateThrottle",
}
_DRF_IMPORT = re.compile(r"from rest_framework\.throttling import \((?P<names>[^)]*)\)")
HERE = Path(__file__).resolve().parent


class SuiteUnavailable(RuntimeError):
    """DRF's sdist could not be obtained (no network and no DJANGO_GCRA_DRF_SDIST)."""


def fetch_sdist(dest: Path, version: str = DRF_VERSION, timeout: float = 120.0) -> Path:
    local = os.environ.get("DJANGO_GCRA_DRF_SDIST")
    if local:
        return Path(local)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--disable-pip-version-check",
           "-q", f"djangorestframework=={version}", "-d", str(dest)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise SuiteUnavailable(f"pip download timed out after {timeout:g}s") from exc
    found = sorted(dest.glob(f"djangorestframework-{version}.tar.gz"))
    if done.returncode or not found:
        raise SuiteUnavailable(f"pip download of djangorestframework=={version} failed:\n{done.stderr[-2000:]}")
    return found[0]


def substitute(source: str) -> str:
    """DRF's test module with its four throttle classes replaced by django_gcra's; nothing else."""
    match = _DRF_IMPORT.search(source)
    if match is None:
        raise AssertionError("DRF's test_throttling.py no longer imports its throttles in one parenthesised block")
    names = [n.strip() for n in match["names"].replace("\n", " ").split(",") if n.strip()]
    if not set(SUBSTITUTIONS) <= set(names):
        raise AssertionError(f"DRF's test_throttling.py imports {names}, not all of {sorted(SUBSTITUTIONS)}")
    kept = [n for n in names if n not in SUBSTITUTIONS]
    ours = sorted(SUBSTITUTIONS.values())
    imports = (f"from rest_framework.throttling import {', '.join(kept)}\n" if kept else "") + \
        f"from django_gcra.throttling import {', '.join(ours)}"
    body = source[:match.start()] + "\x00IMPORTS\x00" + source[match.end():]
    for drf, gcra in SUBSTITUTIONS.items():
        body = re.sub(rf"\b{drf}\b", gcra, body)
    return body.replace("\x00IMPORTS\x00", imports)


def prepare(sdist: Path, workdir: Path) -> Path:
    """Extract DRF's ``tests/`` tree into ``workdir`` and substitute the throttle module."""
    with tarfile.open(sdist) as tar:
        prefix = tar.getnames()[0].split("/", 1)[0] + "/tests/"
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
        for member in members:
            member.name = member.name[len(prefix) - len("tests/"):]
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.11.4
        tar.extractall(workdir, members=members, **safe)
    module = workdir / "tests" / "test_throttling.py"
    module.write_text(substitute(module.read_text()))
    (workdir / "pytest.ini").write_text("[pytest]\n")  # DRF's own options live in its pyproject.toml
    return module


@dataclass
class SuiteResult:
    passed: list[str]
    failed: dict[str, str]  # test id -> first line of the failure
    skipped: list[str]
    output: str

    @property
    def total(self) -> int:
        return len(self.passed) + len(self.failed) + len(self.skipped)


def run(workdir: Path, redis_url: str, timeout: float = 120.0, algorithm: str = "") -> SuiteResult:
    report = workdir / "report.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(workdir), str(HERE)]), "GCRA_DRF_REDIS_URL": redis_url,
           "GCRA_DRF_ALGORITHM": algorithm}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-p",
           "drf_settings_plugin", f"--junitxml={report}", "-o", "junit_family=xunit2", "tests/test_throttling.py"]
    done = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    output = done.stdout[-20000:] + done.stderr[-5000:]
    if not report.exists():
        raise AssertionError(f"DRF's suite did not run (exit {done.returncode}):\n{output}")
    passed, failed, skipped = [], {}, []
    for case in ET.parse(report).iter("testcase"):
        test_id = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        problem = case.find("failure")
        problem = case.find("error") if problem is None else problem
        if problem is not None:
            failed[test_id] = (problem.get("message") or "").splitlines()[0][:300] if problem.get("message") else ""
        elif case.find("skipped") is not None:
            skipped.append(test_id)
        else:
            passed.append(test_id)
    return SuiteResult(passed, failed, skipped, output)
