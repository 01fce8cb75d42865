"""``gcra_status``: policies, active overrides, Redis reach and whether the script is loaded."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_gcra import catalog
from django_gcra.backends.redis import SCRIPT, SCRIPT_SHA
from django_gcra.conf import get_settings
from django_gcra.forms import rate_text
from django_gcra.override_rules import override_problem
from django_gcra.overrides import version_key
from django_gcra.policy import Limit, Policy
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
                if limit.calendar is not None:
                    rates = ", ".join(str(r.count) if t is None else f"{t}: {r.count}" for t, r in limit.rates.items())
                    shape = f"quota per calendar {limit.calendar.period} ({limit.calendar.tz})"
                self.stdout.write(f"  - {limit.name} [{policy.mode_of(limit)}] key {'+'.join(limit.key)}: {rates}, "
                                  f"{shape}")
        self._inline()
        self._drf_scopes()
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

    def _inline(self) -> None:
        """The inline ``@ratelimit`` limits of the views the URLconf imports (overridable: limit ``view``)."""
        problems = catalog.discover()
        self.stdout.write(self.style.MIGRATE_HEADING("Inline @ratelimit limits (views imported by ROOT_URLCONF)"))
        if problems:
            self.stdout.write(self.style.ERROR(f"  {problems}"))
        found = self._code_lines(catalog.INLINE)
        for policy, limit, text in found:
            self.stdout.write(f"  - {policy.name} [{policy.mode_of(limit)}] key {'+'.join(limit.key)}: {text}, "
                              f"on_failure {policy.on_failure} (limit {limit.name})")
        if not found:
            self.stdout.write("  none")

    @staticmethod
    def _code_lines(kind: str) -> list[tuple[Policy, Limit, str]]:
        found = []
        for policy in catalog.policies().values():
            if catalog.origin(policy.name) != kind:
                continue
            for limit in policy.limits:
                rates = ", ".join(rate_text(r) for r in limit.rates.values())
                burst = limit.burst if limit.burst is not None else "= rate count"
                shape = f"burst {burst}" if not limit.sliding else limit.algorithm
                if limit.calendar is not None:
                    rates = ", ".join(str(r.count) for r in limit.rates.values())
                    shape = f"quota per {limit.calendar.period}"
                found.append((policy, limit, f"{rates}, {shape}"))
        return found

    def _drf_scopes(self) -> None:
        """DRF's throttle scopes, which the GCRA throttle classes read: policy ``drf.<scope>``."""
        from django.conf import settings

        rates = (getattr(settings, "REST_FRAMEWORK", None) or {}).get("DEFAULT_THROTTLE_RATES") or {}
        self.stdout.write(self.style.MIGRATE_HEADING("DRF throttle scopes (REST_FRAMEWORK['DEFAULT_THROTTLE_RATES'])"))
        for scope, rate in sorted(rates.items(), key=lambda item: str(item[0])):
            name = f"drf.{catalog.scope_name(str(scope))}"
            known = catalog.origin(name) == catalog.DRF
            where = f" (policy {name}, limit {name[4:]})" if known else " (not limited: rate of 0 or none)"
            self.stdout.write(f"  - {scope}: {rate}{where}")
        others = [(p, lim, text) for p, lim, text in self._code_lines(catalog.DRF)
                  if lim.name not in {catalog.scope_name(str(s)) for s in rates}]
        for policy, limit, text in others:  # throttles seen in this process with a rate of their own
            self.stdout.write(f"  - {policy.name} (limit {limit.name}): {text}")
        if not rates and not others:
            self.stdout.write("  none")

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
            problem = override_problem(o)
            if problem is not None:  # enabled and unexpired, but the limiter ignores it
                self.stdout.write(self.style.WARNING(f"  - {o}: NOT IN FORCE: {problem}"))
                continue
            expiry = f", expires {o.expires_at:%Y-%m-%d %H:%M}" if o.expires_at else ""
            self.stdout.write(f"  - {o}: mode {o.mode}, rate {o.rate or 'as configured'}, "
                              f"burst {o.burst if o.burst is not None else 'as configured'}{expiry}")
