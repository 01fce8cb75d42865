"""Multi-region budgets: each region decides on its own Redis, enforcing its share of
every limit (docs/howto/multi-region.md).

The package, one concern a module (each imports only the ones listed after it):

- ``status.py``: what an operator sees: ``status_lines`` (``gcra_status``);
- ``rebalancer.py``: ``rebalance()`` (``gcra_rebalance``), the one place that talks to
  every region: it reads each region's demand for the last complete window, computes the
  new shares with ``next_shares`` and writes them to every region it reaches;
- ``sync.py``: counting demand in memory and, at most once per ``refresh`` seconds on the
  state's background worker, adding it to the local Redis's demand window and reading the
  share table back. Nothing but the rebalancer ever calls another region;
- ``shares.py``: the request path, memory only: ``ShareState`` and its read side
  (``share_of``, ``tick``), ``scale``, and the key and field names every module uses.

Redis keys, in each region's Redis:

- ``<prefix>:regions:demand:<w>``: hash ``policy/limit`` -> units asked in window ``w``
  (``w = floor(unix time / rebalance_interval)``), expiring after ``DEMAND_WINDOWS`` windows;
  a busy key of a limit is counted under ``policy/limit/<escaped values>`` too;
- ``<prefix>:regions:shares``: hash ``policy/limit`` -> JSON ``{region: share}``, plus
  ``_window`` (the window they were computed from) and ``_at`` (Unix time);
- ``<prefix>:regions:log``: the last ``LOG_LENGTH`` share changes, JSON, newest first.

This process's ``ShareState`` is the engine's (``Engine.shares``); the observer counting its
demand and the Prometheus collector are ``region_demand.py``.
"""

from __future__ import annotations

from ..conf import get_settings
from .rebalancer import (
    BUSY_FRACTION,
    KEY_TTL_WINDOWS,
    LOG_LENGTH,
    MAX_KEY_SHARES,
    RebalanceResult,
    complete_window,
    next_shares,
    rebalance,
)
from .shares import (
    DEFAULT_BUDGET,
    EPSILON,
    MAX_FIELDS,
    ShareState,
    demand_key,
    field_of,
    key_field,
    log_key,
    parse_table,
    scale,
    shares_key,
    window_of,
)
from .status import status_lines
from .sync import BUSY_PER_FLUSH, DEMAND_WINDOWS, KEY_SLOTS

__all__ = ["BUSY_FRACTION", "BUSY_PER_FLUSH", "DEFAULT_BUDGET", "DEMAND_WINDOWS", "EPSILON", "KEY_SLOTS",
           "KEY_TTL_WINDOWS", "LOG_LENGTH", "MAX_FIELDS", "MAX_KEY_SHARES", "RebalanceResult",
           "ShareState", "complete_window", "demand_key", "field_of", "get_settings", "key_field", "log_key",
           "next_shares", "parse_table", "rebalance", "scale", "shares_key", "status_lines", "window_of"]
