"""This process's share state: the package's one ``ShareState`` (``state``), its hooks
(reset on a settings change, forget the parent's demand after a fork), and the
module-level functions that hand it over: ``tick`` and ``share_of`` for planning,
``on_decision`` for the decision observers (kept in place by ``observe_demand``).

Every other use of the state takes it as a parameter (``sync.py``) or is a method of
``ShareState`` (``shares.py``); ``status.RegionCollector`` reads it from here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings

from ..conf import on_change
from ..policy import Limit, Policy
from ..signals import observers
from ..worker import after_fork
from . import sync
from .shares import ShareState

__all__ = ["observe_demand", "on_decision", "share_of", "state", "tick"]

state = ShareState(sync.sync)
on_change(state.reset)


@after_fork
def _forget_in_child() -> None:
    state.forget_parent()


def tick() -> int | None:
    """The share table's version (planning memoizes under it; None without REGIONS); may
    start a background sync."""
    if state.next_sync > time.monotonic():
        return state.version
    return state.tick()


def share_of(policy: Policy, limit: Limit, values: Mapping[str, str]) -> float:
    """The share of ``limit`` this region enforces for these descriptor values (1.0
    without REGIONS). Memory only."""
    return state.share_of(policy, limit, values)


def on_decision(sender: Any, decision: Any, request: Any = None) -> None:
    """Observer of every decision (``signals.observers``) while ``REGIONS`` is set
    (``observe_demand``): count the units asked of each limit in force, in memory."""
    sync.observe(state, decision)


@on_change
def observe_demand() -> None:
    """Keep ``on_decision`` first among ``signals.observers`` exactly while the settings
    name ``REGIONS`` (read raw: settings in error keep it, and their decisions raise
    anyway), so that a process without regions makes one call less per decision. Called
    by ``AppConfig.ready`` and on every settings change."""
    raw = getattr(django_settings, "DJANGO_GCRA", {})
    wanted = not isinstance(raw, Mapping) or raw.get("REGIONS") is not None
    present = on_decision in observers
    if wanted and not present:
        observers.insert(0, on_decision)
    elif present and not wanted:
        observers.remove(on_decision)
