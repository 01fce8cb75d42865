"""``gcra_rebalance``: move each region's shares of the ``shared`` budgets from observed demand.

``--once`` computes from the last complete demand window and exits; without it, it does
so after every window (every ``rebalance_interval`` seconds) until stopped. Run it once
per region or once globally (docs/howto/multi-region.md, "Deploying the rebalancer"):
the shares of a window are computed once, by whichever run reaches it first.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_gcra.conf import get_settings
from django_gcra.regions import RebalanceResult, complete_window, rebalance


class Command(BaseCommand):
    help = "Rebalance the regions' shares of every shared budget from the demand each region observed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="Rebalance once, from the last complete window.")
        parser.add_argument("--force", action="store_true",
                            help="Rebalance even if the shares were already computed from that window.")
        parser.add_argument("--max-runs", type=int, default=None, help="Without --once: stop after this many runs.")

    def handle(self, *args: Any, once: bool, force: bool, max_runs: int | None, **options: Any) -> None:
        regions = get_settings().regions
        if regions is None:
            raise CommandError("DJANGO_GCRA['REGIONS'] is not set: there is nothing to rebalance.")
        if once:
            self._report(rebalance(force=force))
            return
        runs = 0
        while max_runs is None or runs < max_runs:
            runs += 1
            self._report(rebalance(force=force))
            # Sleep until the next window is complete (its last flushes have arrived).
            now = time.time()
            target = complete_window(now, regions) + 1
            while complete_window(time.time(), regions) < target:
                time.sleep(min(0.05, regions.rebalance_interval / 20))

    def _report(self, result: RebalanceResult) -> None:
        if result.unreachable:
            self.stderr.write(f"window {result.window}: unreachable (keeping their last shares): "
                              f"{', '.join(result.unreachable)}")
        if result.skipped:
            self.stdout.write(f"window {result.window}: shares already computed")
            return
        keys = [n for n in result.shares if n.count("/") >= 2]
        if keys:
            self.stdout.write(f"window {result.window}: {len(keys)} busy keys with shares of their own "
                              f"({sum(n in result.changed for n in keys)} moved)")
        for name, shares in sorted((n, v) for n, v in result.shares.items() if n.count("/") == 1):
            wants = ", ".join(f"{r} {d.get(name, 0)}" for r, d in result.demand.items())
            moved = "" if name in result.changed else " (unchanged)"
            self.stdout.write(f"window {result.window}: {name}: "
                              f"{', '.join(f'{r} {s:.3f}' for r, s in shares.items())}{moved}; demand {wants}")
        self.stdout.flush()
