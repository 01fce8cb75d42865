"""Every process reloads the policy plane (overrides and access rules) after a change:
the committing process at once, the others on the version stamp it bumps in Redis."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from . import engine
from .overrides import version_key
from .store import cache_connection

__all__ = ["invalidate", "on_override_change"]

logger = logging.getLogger("django_gcra")


def invalidate() -> None:
    """Make every process reload the overrides once the current transaction commits."""
    transaction.on_commit(_bump)


def _bump() -> None:
    try:  # in the committing thread, which sees the change (a test's transaction included)
        engine.current().overrides.reload_now()
    except Exception as exc:  # the next refresh retries (or the settings are in error: the checks say so)
        logger.warning("django_gcra: could not reload the overrides after a change: %s", exc)
    try:
        cache_connection().incr(version_key())
    except Exception as exc:  # other processes will see the change within OVERRIDE_TTL
        logger.warning("django_gcra: could not bump the override version in Redis: %s", exc)


def on_override_change(sender: Any, **kwargs: Any) -> None:
    """post_save / post_delete receiver for ``LimitOverride`` and ``AccessRule`` (connected in apps.py)."""
    invalidate()
