"""``gcra_status``: policies, active overrides, Redis reach and whether the script is loaded."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_gcra.backends.redis import SCRIPT, SCRIPT_SHA
from django_gcra.conf import get_settings
from django_gcra.overrides import version_key
from django_gcra.store import cache_connection


class Command(BaseCommand):
    help = "Show the configured policies, the overrides in force, and whether Redis answers and has the script."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--load-script", action="store_true", help="Load the GCRA script if Redis lacks it.")

    def handle(self, *args: Any, load_script: bool, **options: Any) -> None:
        config = get_settings()
        self.stdout.write(self.style.MIGRATE_HEADING("Policies"))
        for policy in config.policies.values():
            lease = f", lease {policy.lease.size} for {policy.lease.ttl}s" if policy.lease else ""
            self.stdout.write(f"{policy.name}: mode {policy.mode}, on_failure {policy.on_failure}{lease}")
            for limit in policy.limits:
                rates = ", ".join(str(r) if t is None else f"{t}: {r}" for t, r in limit.rates.items())
                burst = limit.burst if limit.burst is not None else "= rate count"
                shape = f"burst {burst}" if not limit.sliding else f"{limit.algorithm}: N per rolling period"
                self.stdout.write(f"  - {limit.name} [{policy.mode_of(limit)}] key {'+'.join(limit.key)}: {rates}, "
                                  f"{shape}")
        self._overrides()
        self._regions()
        self.stdout.write(self.style.MIGRATE_HEADING("Audit"))
        audit = config.audit
        self.stdout.write(f"  enabled {audit.enabled}, flush_interval {audit.flush_interval}, "
                          f"max_buffer {audit.max_buffer}, retention_days {audit.retention_days}")
        self.stdout.write(self.style.MIGRATE_HEADING(f"Redis (cache alias {config.cache_alias!r})"))
        try:
            client = cache_connection(config.cache_alias)
            started = time.perf_counter()
            client.ping()
            took = (time.perf_counter() - started) * 1000
            loaded = bool(client.script_exists(SCRIPT_SHA)[0])
            if not loaded and load_script:
                loaded = client.script_load(SCRIPT) == SCRIPT_SHA
            version = client.get(version_key())
        except Exception as exc:
            self.stdout.write(self.style.ERROR(f"  unreachable: {type(exc).__name__}: {exc}"))
            raise CommandError("Redis is unreachable") from None
        self.stdout.write(f"  reachable: PING in {took:.1f} ms")
        self.stdout.write(f"  script {SCRIPT_SHA[:12]}: {'loaded' if loaded else 'not loaded (loads on first use)'}")
        self.stdout.write(f"  override version stamp: {version.decode() if version else 'unset'}")

    def _regions(self) -> None:
        from django_gcra import regions

        config = get_settings().regions
        if config is None:
            return
        self.stdout.write(self.style.MIGRATE_HEADING(f"Regions (local {config.local!r})"))
        self.stdout.write(f"  rebalance_interval {config.rebalance_interval:g}s, refresh {config.refresh:g}s, "
                          f"floor {config.floor:g}, smoothing {config.smoothing:g}, max_step {config.max_step:g}")
        for policy in get_settings().policies.values():
            budget = policy.budget or regions.DEFAULT_BUDGET
            detail = {"fixed": f" {dict(budget.shares)}" if budget.shares else " (equal)",
                      "home": f" {budget.home}, away {budget.away:g}"}.get(budget.mode, "")
            self.stdout.write(f"  {policy.name}: budget {budget.mode}{detail}")
        for line in regions.status_lines():
            self.stdout.write(f"  {line}")

    def _overrides(self) -> None:
        from django_gcra.models import LimitOverride

        self.stdout.write(self.style.MIGRATE_HEADING("Overrides in force"))
        try:
            active = list(LimitOverride.objects.in_force())
        except Exception as exc:
            self.stdout.write(self.style.ERROR(f"  database unreachable: {exc}"))
            return
        if not active:
            self.stdout.write("  none")
        for o in active:
            expiry = f", expires {o.expires_at:%Y-%m-%d %H:%M}" if o.expires_at else ""
            self.stdout.write(f"  - {o}: mode {o.mode}, rate {o.rate or 'as configured'}, "
                              f"burst {o.burst if o.burst is not None else 'as configured'}{expiry}")
