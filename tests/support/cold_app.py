"""A fresh ASGI process for the cold-start test (``tests/test_cold_start.py``), served by
uvicorn: ``RateLimitMiddleware`` in front of an async view, one ``on_failure: open``
policy far from its rate, and the limiter's timeouts at their defaults.

``GCRA_REDIS_URL`` names the redis-server. ``/limited/`` is the rate-limited async view
(its ``X-Fallback`` header says whether its decision was a fallback one); ``/status/``
is not limited and reports this process's fallback counters, breakers, timeouts and
the counters of the limiter's asyncio pool.
"""

from __future__ import annotations

import os

from django.http import JsonResponse
from django.urls import path

from tests.support.workers import setup_django

setup_django(
    os.environ["GCRA_REDIS_URL"],
    {
        # Pass the defaults on, so the TEST_TIMEOUT_MS of setup_django does not replace them.
        "TIMEOUT": 10, "CONNECT_TIMEOUT": None,
        "POLICIES": {"cold": {"limits": [{"name": "ip", "key": ["ip"], "rate": "1000000/s", "burst": 1000000}],
                              "on_failure": "open"}},
        "ROUTES": [{"path": r"^/limited/$", "policy": "cold"}],
    },
    ROOT_URLCONF=__name__,
    MIDDLEWARE=["django_gcra.middleware.RateLimitMiddleware"],
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    DEBUG=False,
)


async def limited(request):
    decision = getattr(request, "ratelimit", None)
    response = JsonResponse({"ok": True})
    response["X-Fallback"] = "1" if decision is not None and decision.fallback else "0"
    return response


async def status(request):
    from django_gcra.engine import current

    engine = current()
    s = engine.settings
    pools = [client.connection_pool for client in engine.stores.async_clients()]
    report = engine.status()  # fallback.status()
    return JsonResponse({"fallback": engine.failures.stats.total(), "breakers": report["breakers"],
                         "timeout": s.timeout, "connect_timeout": s.connect_timeout,
                         "last_error": report["fallback"]["last_error"],
                         "pools": [{k: getattr(p, k, None) for k in POOL_STATS} for p in pools]})


# What the limiter's asyncio pool counts (none of it before the cold-start fix).
POOL_STATS = ("setups", "setup_failures", "waits", "longest_wait", "round_trip_timeouts", "max_connections")


urlpatterns = [path("limited/", limited), path("status/", status)]

from django.core.asgi import get_asgi_application  # noqa: E402  (after settings.configure)

app = get_asgi_application()
