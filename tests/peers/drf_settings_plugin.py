"""A pytest plugin for DRF's own test run: DRF's settings, plus what django_gcra needs.

DRF's ``tests/conftest.py`` calls ``settings.configure(...)`` in ``pytest_configure``;
this plugin, loaded before it with ``-p``, adds to those options only: ``django_gcra``
in ``INSTALLED_APPS``, a django-redis ``default`` cache on the redis-server named by
``GCRA_DRF_REDIS_URL``, and ``DJANGO_GCRA`` with the test suite's generous limiter
timeout (tests/support/workers.py's TEST_TIMEOUT_MS; this process cannot import it, since
DRF's ``tests`` package takes that name) and no audit trail.
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import LazySettings, global_settings

_configure = LazySettings.configure


def configure(self: LazySettings, default_settings: Any = global_settings, **options: Any) -> None:
    options["INSTALLED_APPS"] = (*options.get("INSTALLED_APPS", ()), "django_gcra")
    options["CACHES"] = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                     "LOCATION": os.environ["GCRA_DRF_REDIS_URL"]}}
    options["DJANGO_GCRA"] = {"TIMEOUT": 1000, "AUDIT": {"ENABLED": False}}
    if os.environ.get("GCRA_DRF_ALGORITHM"):  # the DRF_ALGORITHM setting (DRF's rolling window: sliding_log)
        options["DJANGO_GCRA"]["DRF_ALGORITHM"] = os.environ["GCRA_DRF_ALGORITHM"]
    _configure(self, default_settings, **options)


LazySettings.configure = configure  # type: ignore[method-assign]
