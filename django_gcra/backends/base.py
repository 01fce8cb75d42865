"""The backend interface. Backends know keys and numbers, never requests or policies."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from asgiref.sync import sync_to_async

from ..algorithm import ALLOWED, GCRA


class BackendError(Exception):
    """The store could not answer (connection refused, timeout, cluster error...)."""


class LimitSpec(NamedTuple):
    """One limit of one decision, as plain numbers.

    GCRA (``algorithm`` 0): ``interval`` us between units, ``burst`` units at once. The
    sliding log (1) and the weighted window (2): ``burst`` is N, the units admitted in
    any ``period`` us (``interval`` is then informative only: period / N, rounded up).
    A concurrency limit (3): ``burst`` is its max, ``period`` (and ``interval``) its slots'
    ttl in us; one slot per allowed decision, whatever the cost. A calendar quota (4):
    ``burst`` is its units per period, ``calendar`` the ``periods.Calendar`` whose
    boundaries the script is sent (``period``: the period's usual length, informative).
    """

    key: str
    interval: int  # us
    burst: int
    enforce: bool = True  # False: a shadow limit, whose denial only counts as "would deny"
    algorithm: int = GCRA  # algorithm.GCRA, SLIDING_LOG or SLIDING_WINDOW
    period: int = 0  # us; the sliding algorithms' window
    calendar: Any = None  # a quota's periods.Calendar (algorithm QUOTA: burst is its units per period)


class Outcome(NamedTuple):
    enforced: int  # algorithm.ALLOWED, DENIED or IMPOSSIBLE
    would: int
    retry_after: int | None  # us for the binding limit; None if never satisfiable
    binding: int | None  # index into the specs
    now: int  # the store's clock, us since the epoch
    remaining: tuple[int, ...]
    reset_after: tuple[int, ...]  # us until each key is fully rested (sliding: until one more unit frees)
    granted: int | None = None  # take(): the units consumed (0 when denied)
    waited: int = 0  # us until the reserved slot (shaping: evaluate with max_wait); 0: admitted now
    slots: Any = None  # slots.Slots: the concurrency slots an allowed decision holds (None: none)

    @property
    def allowed(self) -> bool:
        return self.enforced == ALLOWED


#: A decision answered from this process's memory (a lease): (remaining, us until the key
#: is rested, the store's clock in us).
Served = tuple[int, int, int]


class Backend(ABC):
    """Runs one all-or-nothing GCRA decision over ``specs`` for ``cost`` units."""

    def serve(self, specs: Sequence[LimitSpec], cost: int, in_loop: bool = False) -> Served | None:
        """The decision when this process can answer it from memory (a leased key: see
        ``LeasingBackend``), as numbers, with no ``Outcome`` made; None (every store):
        ``evaluate`` decides it. ``in_loop``: called from a coroutine."""
        return None

    @abstractmethod
    def evaluate(self, specs: Sequence[LimitSpec], cost: int, max_wait: int = 0) -> Outcome:
        """Decide now. ``max_wait`` (us; shaping): a decision its enforcing GCRA limits deny
        for at most that long is admitted for its own future slot, ``Outcome.waited`` us
        from ``Outcome.now`` (the caller waits). Callers pass ``max_wait`` only when it is
        above 0 (a store that cannot shape need not take it)."""

    async def aevaluate(self, specs: Sequence[LimitSpec], cost: int, max_wait: int = 0) -> Outcome:
        """Async variant; the default runs ``evaluate`` in a worker thread."""
        if max_wait > 0:
            return await sync_to_async(self.evaluate, thread_sensitive=False)(specs, cost, max_wait)
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

    def take_ahead(self, specs: Sequence[LimitSpec], most: int, least: int,
                   done: Callable[[Outcome | None], None]) -> Callable[[], None] | None:
        """``take`` sent now without waiting for its reply (a lease's prefetch on the thread
        that will spend it): ``done`` gets the outcome (None if the call failed) once the
        reply is read, by this thread's next call to the store or by the returned
        ``collect()`` (from any thread; it waits for the reply). None when this store, on
        this thread, cannot (nothing was sent). ``done`` must not call the store."""
        return None

    def settle(self, specs: Sequence[LimitSpec], delta: int, at: int) -> int:
        """Move every limit of ``specs`` (rate and quota limits of one allowed decision made
        at ``at``, the store's us) by ``delta`` units in one atomic step: owed when above 0,
        refunded when below, as ``metered.py`` bounds it. Returns the store's time (us)."""
        raise NotImplementedError(f"{type(self).__name__} cannot settle a metered cost")

    async def asettle(self, specs: Sequence[LimitSpec], delta: int, at: int) -> int:
        """Async ``settle``; the default runs it in a worker thread."""
        return await sync_to_async(self.settle, thread_sensitive=False)(specs, delta, at)

    def read_tats(self, keys: Sequence[str]) -> list[int | None]:
        """The stored TATs (us) of ``keys``, for inspection; None where a key is absent."""
        raise NotImplementedError

    def read_states(self, specs: Sequence[LimitSpec]) -> list[Any]:
        """What each limit's key stores, in the twins' terms (``algorithm.composite``): a GCRA
        TAT, the log's entry times, or a weighted window's (start, cur, prev); None where absent."""
        raise NotImplementedError


def _granted(outcome: Outcome, units: int) -> Outcome:
    return outcome._replace(granted=units if outcome.allowed else 0)
