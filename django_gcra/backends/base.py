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

    def read_tats(self, keys: Sequence[str]) -> list[int | None]:
        """The stored TATs (us) of ``keys``, for inspection; None where a key is absent."""
        raise NotImplementedError
