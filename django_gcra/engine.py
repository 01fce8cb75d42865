"""The engine: every piece of state the decision path reads or keeps, built whole from
one ``Settings``, and the one reference to the engine in force (``current()``).

An ``Engine`` owns the stores (clients, backends, circuit breakers), the lease wrappers and
their prefetches, the policy plane's overrides and access rules, the regional shares, the
planner and its memo, the concurrency slots' book, the failure policy and the settler; and
so every background worker they run. ``decide()`` is ``current().decide()``.

When the settings change (``conf.on_change``), the engine in force is retired (its workers
stopped, its queued slot releases sent) and the next decision builds a new one; a forked
child builds its own (``worker.after_fork``): the parent's leases, slots and threads are the
parent's. At exit the engine in force is retired too.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import time
from collections.abc import Mapping
from typing import Any

from django.http import HttpRequest

from . import catalog
from .access import acheck, check
from .backends import Backend, BackendError, Outcome
from .backends import clock as test_clock
from .backends.base import Served
from .backends.slots import SlotBook
from .conf import Settings, get_settings, on_change
from .decision import Decision
from .failure import FailurePolicy
from .lease_book import LeaseBook
from .outcomes import disabled, finish
from .overrides import OverrideCache
from .plan import Plan, Planner
from .policy import PerPolicy, Policy
from .regions import sync as share_sync
from .regions.shares import ShareState
from .settling import Settler
from .store import Stores
from .validation import max_wait_problem
from .worker import after_fork

__all__ = ["Engine", "current", "max_wait_us", "retire"]


class Engine:
    """The decision path of one configuration (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.slots = SlotBook()
        self.stores = Stores(settings, self.slots, test_clock.active)  # (under limiter_clock: clocked, no leases)
        self.leases = LeaseBook(settings.lease_max_keys)
        self.overrides = OverrideCache(settings, self.stores.read_guarded)
        self.shares = ShareState(share_sync.sync)  # REGIONS: this region's shares, its demand
        self.planner = Planner(settings, self.overrides, self.shares, self.backend_for)
        self.shares.listeners.append(self.planner.memo.clear)  # new shares: new specs
        self.failures = FailurePolicy(settings, self.slots)
        self.settler = Settler(self.stores)
        self.settlers = self.settler.settlers  # (every settlement's first item: read once per decision)
        self._backends: PerPolicy[Backend] = PerPolicy()

    def backend_for(self, policy: Policy) -> Backend:
        """The backend that decides ``policy``: the store of its ``cache_alias`` (default
        ``CACHE_ALIAS``), behind local leases when the policy has a ``lease``."""
        found = self._backends.get(policy)
        if found is None:
            if self.stores.clock is None:
                found = self.leases.wrap(self.stores.backend(policy.cache_alias), policy)
            else:
                found = self.stores.clocked(policy.cache_alias)
            self._backends.put(policy, found)
        return found

    def plan(self, policy: str | Policy, descriptors: Mapping[str, Any], cost: int = 1) -> Plan:
        return self.planner.plan(policy, descriptors, cost)

    def decide(self, policy: str | Policy, descriptors: Mapping[str, Any], cost: int = 1, max_wait: float = 0.0,
               request: HttpRequest | None = None) -> Decision:
        """``django_gcra.decide`` (its docstring)."""
        if not self.settings.enabled:  # DJANGO_GCRA["ENABLED"] is False
            return disabled(policy, cost, request)
        wait_us = max_wait_us(max_wait) if max_wait else 0
        if self.overrides.ruled and (ruled := check(self.overrides, policy, descriptors, cost, request)) is not None:
            return ruled  # exempt or deny (access.py): no store call
        p = self.planner.plan(policy, descriptors, cost)
        if not p.specs:
            return finish(p, None, request, self.settlers)
        try:
            backend = p.backend
            if wait_us:
                outcome: Outcome | Served | None = backend.evaluate(p.specs, cost, wait_us)
            # A leased key's local path first (the lease's numbers, no Outcome made); else the
            # two-argument call: every store takes it (and it is the hot path).
            elif (outcome := backend.serve(p.specs, cost)) is None:
                outcome = backend.evaluate(p.specs, cost)
        except BackendError as exc:
            return finish(p, self.failures.on_failure(p, exc), request, self.settlers, fallback=True)
        if wait_us and isinstance(outcome, Outcome) and outcome.waited > 0:
            time.sleep(outcome.waited / 1e6)
        return finish(p, outcome, request, self.settlers)

    async def adecide(self, policy: str | Policy, descriptors: Mapping[str, Any], cost: int = 1,
                      max_wait: float = 0.0, request: HttpRequest | None = None) -> Decision:
        """``django_gcra.adecide`` (its docstring)."""
        if not self.settings.enabled:
            return disabled(policy, cost, request)
        wait_us = max_wait_us(max_wait) if max_wait else 0
        if self.overrides.ruled and (
                ruled := await acheck(self.overrides, policy, descriptors, cost, request)) is not None:
            return ruled
        p = self.planner.plan(policy, descriptors, cost)
        if not p.specs:
            return finish(p, None, request, self.settlers)
        try:
            backend = p.backend
            if wait_us:
                outcome: Outcome | Served | None = await backend.aevaluate(p.specs, cost, wait_us)
            elif (outcome := backend.serve(p.specs, cost, True)) is None:
                outcome = await backend.aevaluate(p.specs, cost)
        except BackendError as exc:
            return finish(p, self.failures.on_failure(p, exc), request, self.settlers, fallback=True)
        if wait_us and isinstance(outcome, Outcome) and outcome.waited > 0:
            await asyncio.sleep(outcome.waited / 1e6)
        return finish(p, outcome, request, self.settlers)

    def status(self) -> dict[str, object]:
        """This engine's fallback counters, circuit breakers and concurrency slots."""
        return {"fallback": self.failures.stats.snapshot(), "breakers": self.stores.breakers.snapshot(),
                "slots": self.slots.stats.snapshot()}

    def close(self) -> None:
        """Stop every background worker of this engine (its queued slot releases are sent first)."""
        self.overrides.close()
        self.shares.worker.stop(last_step=False)
        self.leases.close()
        self.slots.close()


def max_wait_us(max_wait: float) -> int:
    """``max_wait`` seconds as whole microseconds; ValueError unless a finite number >= 0."""
    problem = max_wait_problem(max_wait)
    if problem:
        raise ValueError(f"max_wait {problem}")
    return int(max_wait * 1_000_000)


#: The engine in force (None until the first decision, and after a change of the settings).
running: Engine | None = None
_lock = threading.Lock()


def current() -> Engine:
    """The engine in force, built from the current settings on first use."""
    global running
    engine = running
    if engine is None:
        with _lock:  # (the settings read under the lock: a change meanwhile retires what is built from them)
            engine = running
            if engine is None:
                engine = running = Engine(get_settings())  # ImproperlyConfigured while they are in error
    return engine


@on_change
def retire() -> None:
    """Retire the engine in force: the next decision builds one from the settings then."""
    global running
    with _lock:
        engine, running = running, None
    if engine is not None:
        engine.close()


@after_fork
def _forget_in_child() -> None:
    global running, _lock
    _lock = threading.Lock()
    engine, running = running, None
    if engine is not None:
        engine.slots.forget()  # the parent's slots: the parent keeps and releases them


def _expire_overrides() -> None:
    engine = running
    if engine is not None:
        engine.overrides.expire()


catalog.listeners.append(_expire_overrides)  # a new code policy: its overrides join the index
atexit.register(retire)
