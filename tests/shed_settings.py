"""Settings of the gunicorn server in tests/test_shedding_load.py and
benchmarks/bench_shedding.py: tests/settings.py with LoadSheddingMiddleware alone, over
tests/shedding_urls.py. ``SHED_MODE`` (off | fixed | adaptive), ``SHED_MAX`` (max_in_flight)
and ``SHED_MIN_RTT_SAMPLES``, ``SHED_SAMPLE_INTERVAL`` come from the environment the harness sets."""

import os

from tests.settings import *  # noqa: F403

ROOT_URLCONF = "tests.shedding_urls"
_mode = os.environ.get("SHED_MODE", "fixed")
MIDDLEWARE = [] if _mode == "off" else ["django_gcra.middleware.LoadSheddingMiddleware"]
DJANGO_GCRA = {
    "AUDIT": {"ENABLED": False},
    "SHEDDING": {"max_in_flight": int(os.environ.get("SHED_MAX", "8")), "adaptive": _mode == "adaptive",
                 "exempt": [r"^/health/"], "min_rtt_samples": int(os.environ.get("SHED_MIN_RTT_SAMPLES", "20")),
                 "sample_interval": float(os.environ.get("SHED_SAMPLE_INTERVAL", "0.1"))},
}
