"""django-ninja's own throttling tests against ``django_gcra.ninja``.

The suite comes from django-ninja's sdist at test time (never copied into the repository):
the installed release's, or, since the sdists of django-ninja 1.7 and later no longer ship
the tests, the newest release whose sdist does (``SUITE_FALLBACK``). The one change to
``tests/test_throttling.py`` is where the four throttle classes are imported from
(``ninja.throttling`` -> ``django_gcra.ninja``, the same names; ``BaseThrottle`` stays
ninja's); its settings are tests/peers/ninja_settings.py (the cache on a real
redis-server). It runs with pytest in a subprocess; its JUnit XML gives each test's
outcome. Every test must pass except EXPECTED_FAILURES, which are listed with the reason
in docs/howto/migrate-from-ninja.md; one that starts passing fails this test too, so the
list and the guide stay true. Offline: ``DJANGO_GCRA_NINJA_SDIST`` names a local copy of
a sdist that ships the tests, or ``DJANGO_GCRA_SKIP_PEER_SUITES=1`` skips
(tests/peers/sdist.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.peers.sdist import download_sdist, read_member
from tests.support.servers import start_redis

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = version("django-ninja")
TOTAL = 12  # the tests in django-ninja 1.6.2's tests/test_throttling.py
SUITE_FALLBACK = "1.6.2"  # the newest django-ninja whose sdist ships tests/ (1.6.3 and 1.7.x do not)
CLASSES = ("AnonRateThrottle", "AuthRateThrottle", "SimpleRateThrottle", "UserRateThrottle")
_IMPORT = re.compile(r"from ninja\.throttling import \((?P<names>[^)]*)\)")

# test -> why it fails against django_gcra.ninja (each one also in the migration guide)
EXPECTED_FAILURES = {
    "test_global_throttling": "asserts the body of ninja's own 429 and moves the throttle's mocked timer 2 s ahead, "
                              "expecting a new request to pass: time is Redis's, and no request passes before the "
                              "1/s interval really elapsed",
    "test_throttle_anon": "asserts wait() == 1.0 after an admitted request (ninja's estimate of the next "
                          "slot): wait() answers only for a denied request, None otherwise",
    "test_throttle_auth": "moves the mocked timer 2 s ahead and expects a new request to pass",
    "test_throttle_user": "moves the mocked timer 2 s ahead and expects a new request to pass",
    "test_operation_throttling": "asserts the body of ninja's own 429 ({'detail': 'Too many requests.'}); a denial "
                                 "here is the project's 429 everywhere (error, message, retry_after_seconds)",
    "test_router_throttling": "asserts the body of ninja's own 429, as test_operation_throttling",
    "test_router2_throttling": "asserts the body of ninja's own 429, as test_operation_throttling",
    "test_wait": "asserts wait() == 60 for the 6th request at 5/m (ninja's window frees a slot 60 s after the "
                 "first request); GCRA refills one unit every 12 s, so the exact wait is 12 s. It then moves the "
                 "mocked timer and sets the request history by hand, which a Redis-backed throttle has not",
}


def substitute(source: str) -> str:
    """ninja's test module with its throttle classes imported from django_gcra.ninja; nothing else."""
    match = _IMPORT.search(source)
    assert match is not None, "ninja's test_throttling.py no longer imports its throttles in one parenthesised block"
    names = [n.strip() for n in match["names"].replace("\n", " ").split(",") if n.strip()]
    assert set(CLASSES) <= set(names), f"ninja's test_throttling.py imports {names}, not all of {CLASSES}"
    kept = [n for n in names if n not in CLASSES]
    imports = (f"from ninja.throttling import {', '.join(kept)}\n" if kept else "") + \
        f"from django_gcra.ninja import {', '.join(CLASSES)}"
    return source[:match.start()] + imports + source[match.end():]


def suite_source(tmp_path: Path) -> tuple[str, str]:
    """(the release the suite comes from, its tests/test_throttling.py)."""
    for release in dict.fromkeys((INSTALLED, SUITE_FALLBACK)):
        archive = download_sdist(f"django-ninja=={release}", tmp_path / release, local_env="DJANGO_GCRA_NINJA_SDIST")
        try:
            return release, read_member(archive, "tests/test_throttling.py")
        except AssertionError:  # this sdist ships no tests
            continue
    pytest.fail(f"neither django-ninja {INSTALLED} nor {SUITE_FALLBACK} ships tests/test_throttling.py in its sdist")


def run(workdir: Path, redis_url: str) -> dict[str, str]:
    report = workdir / "report.xml"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NINJA_PEER_REDIS_URL": redis_url,
           "DJANGO_SETTINGS_MODULE": "tests.peers.ninja_settings"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", f"--junitxml={report}",
           "-o", "junit_family=xunit2", "test_throttling.py"]
    done = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=240)
    assert report.exists(), f"ninja's suite did not run (exit {done.returncode}):\n{done.stdout[-8000:]}{done.stderr}"
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        problem = case.find("failure")
        problem = case.find("error") if problem is None else problem
        outcome = "passed" if problem is None else f"{problem.tag}: {problem.get('message', '')[:300]}"
        outcomes[case.get("name")] = "skipped" if case.find("skipped") is not None else outcome
    return outcomes


def test_ninja_throttling_suite_passes_but_where_time_is_mocked(tmp_path):
    release, original = suite_source(tmp_path)
    workdir = tmp_path / "suite"
    workdir.mkdir()
    (workdir / "test_throttling.py").write_text(substitute(original))
    (workdir / "pytest.ini").write_text("[pytest]\nasyncio_mode = strict\n")
    server = start_redis()
    try:
        outcomes = run(workdir, server.url)
    finally:
        server.stop()
    assert len(outcomes) == TOTAL, outcomes
    not_passed = {name: outcome for name, outcome in outcomes.items() if outcome != "passed"}
    unexpected = {name: outcome for name, outcome in not_passed.items() if name not in EXPECTED_FAILURES}
    assert not unexpected, f"django-ninja {release} tests failing against django_gcra.ninja:\n" + "\n".join(
        f"{name}: {outcome}" for name, outcome in sorted(unexpected.items()))
    now_passing = sorted(set(EXPECTED_FAILURES) - set(not_passed))
    assert not now_passing, f"expected failures that pass now (update the list and the guide): {now_passing}"
    assert all(not_passed[name].startswith("failure: ") for name in EXPECTED_FAILURES), not_passed
    print(f"django-ninja {release} throttling suite: {len(outcomes) - len(not_passed)} passed, "
          f"{len(not_passed)} expected failures of {len(outcomes)}")


def test_substitution_changes_only_where_the_classes_come_from():
    source = ("import pytest\nfrom ninja.throttling import (\n    AnonRateThrottle,\n    AuthRateThrottle,\n"
              "    BaseThrottle,\n    SimpleRateThrottle,\n    UserRateThrottle,\n)\n\nth = AnonRateThrottle('1/s')\n")
    assert substitute(source) == (
        "import pytest\nfrom ninja.throttling import BaseThrottle\nfrom django_gcra.ninja import AnonRateThrottle, "
        "AuthRateThrottle, SimpleRateThrottle, UserRateThrottle\n\nth = AnonRateThrottle('1/s')\n")


def test_every_expected_failure_is_in_the_migration_guide():
    guide = (ROOT / "docs" / "howto" / "migrate-from-ninja.md").read_text()
    assert all(f"`{name}`" in guide for name in EXPECTED_FAILURES)
