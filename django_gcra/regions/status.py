"""What an operator sees of the regions: ``status_lines`` (``manage.py gcra_status``: every
region's shares and demand, read from each region's Redis, and the latest share changes)
(this process's share and demand, for ``prometheus_client``: ``region_demand.RegionCollector``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..conf import get_settings
from ..store import cache_connection
from .rebalancer import complete_window
from .shares import demand_key, log_key, parse_table, shares_key

__all__ = ["status_lines"]


def status_lines(connect: Callable[[str], Any] = cache_connection, changes: int = 5) -> list[str]:
    """``gcra_status``'s view of the regions: each region's shares and its demand in the
    last complete window, and the latest share changes (from the local region's log)."""
    config = get_settings()
    regions = config.regions
    if regions is None:
        return []
    window = complete_window(time.time(), regions)
    lines = []
    for region, alias in regions.caches.items():
        try:
            pipe = connect(alias).pipeline(transaction=False)
            pipe.hgetall(shares_key(config.prefix))
            pipe.hgetall(demand_key(config.prefix, window))
            shares_raw, demand_raw = pipe.execute()
        except Exception as exc:
            lines.append(f"{region} ({alias}): unreachable: {type(exc).__name__}: {exc}")
            continue
        stamp = shares_raw.pop(b"_window", None)
        shares_raw.pop(b"_at", None)
        table = parse_table(shares_raw)
        since = f"from window {int(stamp)}" if stamp is not None else "never rebalanced: equal shares"
        lines.append(f"{region} ({alias}): shares {since}")
        names = sorted(set(table) | {k.decode() for k in demand_raw})
        keys = [n for n in names if n.count("/") >= 2]
        for name in [n for n in names if n.count("/") == 1] + keys[:10]:
            share = table.get(name, {}).get(region)
            shown = f"{share:.3f}" if share is not None else f"{regions.equal:.3f} (equal)"
            lines.append(f"  {name}: share {shown}, demand {int(demand_raw.get(name.encode(), 0))} "
                         f"units in window {window}")
        if len(keys) > 10:
            lines.append(f"  ... and {len(keys) - 10} more keys with shares or demand of their own")
    try:
        log = connect(regions.caches[regions.local]).lrange(log_key(config.prefix), 0, changes - 1)
    except Exception:
        log = []
    if log:
        lines.append("latest share changes (newest first):")
        lines.extend(f"  {entry.decode()}" for entry in log)
    return lines
