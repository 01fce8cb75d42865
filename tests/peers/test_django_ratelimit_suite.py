"""django-ratelimit 4.1.0's own test suite against ``django_gcra.compat.django_ratelimit``.

The suite comes from the package's sdist at test time; the only change to it is the
package name (``django_ratelimit`` -> ``django_gcra.compat.django_ratelimit``), and its
settings are tests/peers/drl_settings.py (their test settings, the caches on Redis). It
runs under Django's test runner in a subprocess. Every test must pass except
EXPECTED_FAILURES, which are listed with the reason in
docs/howto/migrate-from-django-ratelimit.md; one that starts passing fails this test too,
so the list and the guide stay true. Offline: ``DJANGO_GCRA_DRL_SDIST`` names a local copy
of the sdist, or ``DJANGO_GCRA_SKIP_PEER_SUITES=1`` skips (tests/peers/sdist.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.peers.sdist import download_sdist, read_member, rename_package
from tests.support.servers import free_port, start_redis

pytestmark = [pytest.mark.redis, pytest.mark.slow]

REQUIREMENT = "django-ratelimit==4.1.0"
NEW_NAME = "django_gcra.compat.django_ratelimit"
ROOT = Path(__file__).resolve().parents[2]
PREFIX = f"{NEW_NAME}.tests."

# A fixed window counts a denied request (its counter goes past the limit); GCRA does not
# spend anything on a denial, so a peek after a denial reports the bucket as it is.
EXPECTED_FAILURES = {
    "FunctionsTests.test_not_increment_after_increment":
        "asserts count 2 and should_limit on a peek after two requests at 1/m: the denied second "
        "request was counted by the fixed window; under GCRA it spent nothing",
}


def test_django_ratelimit_suite_passes(tmp_path: Path) -> None:
    archive = download_sdist(REQUIREMENT, tmp_path / "sdist", local_env="DJANGO_GCRA_DRL_SDIST")
    original = read_member(archive, "django_ratelimit/tests.py")
    rewritten, renamed = rename_package(original, "django_ratelimit", NEW_NAME)
    assert renamed >= 3, "the suite no longer imports django_ratelimit: is this the right sdist?"
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "tests.py").write_text(rewritten)

    server = start_redis()
    try:
        env = {**os.environ, "DRL_PEER_REDIS_URL": server.url,
               "DRL_PEER_DEAD_URL": f"redis://127.0.0.1:{free_port()}/0",
               "DJANGO_SETTINGS_MODULE": "tests.peers.drl_settings", "PYTHONPATH": str(ROOT)}
        out = tmp_path / "outcomes.json"
        done = subprocess.run([sys.executable, "-m", "tests.peers.drl_runner", str(overlay), str(out)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    finally:
        server.stop()
    assert out.exists(), f"the runner wrote no outcomes:\n{done.stdout}\n{done.stderr}"
    outcomes = {name.removeprefix(PREFIX): outcome for name, outcome in json.loads(out.read_text()).items()}

    assert len(outcomes) >= 50, f"only {len(outcomes)} tests ran:\n{done.stderr}"
    not_passed = {name: outcome for name, outcome in outcomes.items() if outcome != "passed"}
    unexpected = {name: outcome for name, outcome in not_passed.items() if name not in EXPECTED_FAILURES}
    assert not unexpected, "django-ratelimit tests failing against the compat layer:\n" + "\n".join(
        f"{name}: {outcome}" for name, outcome in sorted(unexpected.items()))
    now_passing = sorted(set(EXPECTED_FAILURES) - set(not_passed))
    assert not now_passing, f"expected failures that pass now (update the list and the guide): {now_passing}"
    for name in EXPECTED_FAILURES:
        assert not_passed[name].startswith("failed: "), f"{name} should fail its assertion, not: {not_passed[name]}"
    print(f"django-ratelimit 4.1.0 suite: {len(outcomes) - len(not_passed)} passed, "
          f"{len(not_passed)} expected failures of {len(outcomes)}")
