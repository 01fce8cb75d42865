"""The pytest plugin of django_gcra (registered by the package's ``pytest11`` entry point).

Active only in projects that use pytest-django: it then offers two fixtures, and changes
nothing in a test that does not ask for them.

- ``gcra_reset``: ``django_gcra.testing.reset_limits()`` before and after the test.
- ``gcra_clock``: a ``django_gcra.testing.limiter_clock()`` active for the test (the
  fixture's value: ``gcra_clock.advance(2.5)``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

__all__ = ["GCRAFixtures"]


class GCRAFixtures:
    """The fixtures, registered as a plugin of their own when pytest-django is in use."""

    @pytest.fixture
    def gcra_reset(self) -> Iterator[None]:
        from django_gcra.testing import reset_limits

        reset_limits()
        yield
        reset_limits()

    @pytest.fixture
    def gcra_clock(self) -> Iterator[Any]:
        from django_gcra.testing import limiter_clock

        with limiter_clock() as clock:
            yield clock


def _uses_pytest_django(config: pytest.Config) -> bool:
    return any(getattr(plugin, "__name__", "") == "pytest_django.plugin"
               for plugin in config.pluginmanager.get_plugins())


def pytest_configure(config: pytest.Config) -> None:
    if _uses_pytest_django(config) and not config.pluginmanager.has_plugin("django_gcra.fixtures"):
        config.pluginmanager.register(GCRAFixtures(), "django_gcra.fixtures")
