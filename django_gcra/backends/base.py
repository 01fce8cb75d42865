"""The backend interface. Backends know keys and numbers, never requests or policies."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import NamedTuple

from asgiref.sync import sync_to_async

from ..algorithm import ALLOWED


class BackendError(Exception):
    """The store could not answer (connection refused, timeout, cluster error...)."""


class LimitSpec(NamedTuple):
    key: str
    interval: int  # us
    burst: int
    enforce: bool = True  # False: a shadow limit, whose denial only counts as "would deny"


class Outcome(NamedTuple):
    enforced: int  # algorithm.ALLOWED, DENIED or IMPOSSIBLE
    would: int
    retry_after: int | None  # us for the binding limit; None if never satisfiable
    binding: int | None  # index into the specs
    now: int  # the store's clock, us since the epoch
    remaining: tuple[int, ...]
    reset_after: tuple[int, ...]  # us until each key is fully rested
    granted: int | None = None  # take(): the units consumed (0 when denied)

    @property
    def allowed(self) -> bool:
        return self.enforced == ALLOWED


class Backend(ABC):
    """Runs one all-or-nothing GCRA decision over ``specs`` for ``cost`` units."""

    @abstractmethod
    def evaluate(self, specs: Sequence[LimitSpec], cost: int) -> Outcome: ...

    async def aevaluate(self, specs: Sequence[LimitSpec], cost: int) -> Outcome:
        """Async variant; the default runs ``evaluate`` in a worker thread."""
        return await sync_to_async(self.evaluate, thread_sensitive=False)(specs, cost)

    def take(self, specs: Sequence[LimitSpec], most: int, least: int) -> Outcome:
        """Consume as many units as every limit has free, at most ``most`` and at least
        ``least`` (a lease refill); ``granted`` says how many. Denied (granted 0) when
        not even ``least`` fit, with the retry-after of ``least`` units.

        This default makes two decisions near the edge; stores override it with one.
        """
        outcome = self.evaluate(specs, most)
        if not outcome.allowed and least < most:
            return _granted(self.evaluate(specs, least), least)
        return _granted(outcome, most)

    async def atake(self, specs: Sequence[LimitSpec], most: int, least: int) -> Outcome:
        """Async ``take``; the default runs it in a worker thread."""
        return await sync_to_async(self.take, thread_sensitive=False)(specs, most, least)

    def read_tats(self, keys: Sequence[str]) -> list[int | None]:
        """The stored TATs (us) of ``keys``, for inspection; None where a key is absent."""
        raise NotImplementedError


def _granted(outcome: Outcome, units: int) -> Outcome:
    return outcome._replace(granted=units if outcome.allowed else 0)
