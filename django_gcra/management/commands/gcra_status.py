"""``gcra_status``: policies, active overrides, Redis reach and whether the script is loaded."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q
from django.utils import timezone

from django_gcra.audit import AUDIT_DEFAULTS, audit_setting
from django_gcra.backends.redis import SCRIPT_SHA, django_redis_client
from django_gcra.conf import get_config
from django_gcra.overrides import version_key


class Command(BaseCommand):
    help = "Show the configured policies, the overrides in force, and whether Redis answers and has the script."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--load-script", action="store_true", help="Load the GCRA script if Redis lacks it.")

    def handle(self, *args: Any, load_script: bool, **options: Any) -> None:
        config = get_config()
        self.stdout.write(self.style.MIGRATE_HEADING("Policies"))
        for policy in config.policies.values():
            lease = f", lease {policy.lease.size} for {policy.lease.ttl}s" if policy.lease else ""
            self.stdout.write(f"{policy.name}: mode {policy.mode}, on_failure {policy.on_failure}{lease}")
            for limit in policy.limits:
                rates = ", ".join(str(r) if t is None else f"{t}: {r}" for t, r in limit.rates.items())
                burst = limit.burst if limit.burst is not None else "= rate count"
                mode = "shadow" if "shadow" in (policy.mode, limit.mode) else "enforce"  # as decide() applies it
                self.stdout.write(f"  - {limit.name} [{mode}] key {'+'.join(limit.key)}: {rates}, burst {burst}")
        self._overrides()
        self.stdout.write(self.style.MIGRATE_HEADING("Audit"))
        self.stdout.write("  " + ", ".join(f"{k.lower()} {audit_setting(k)}" for k in AUDIT_DEFAULTS))
        self.stdout.write(self.style.MIGRATE_HEADING(f"Redis (cache alias {config.cache_alias!r})"))
        try:
            client = django_redis_client(config.cache_alias)
            started = time.perf_counter()
            client.ping()
            took = (time.perf_counter() - started) * 1000
            loaded = bool(client.script_exists(SCRIPT_SHA)[0])
            if not loaded and load_script:
                from django_gcra.backends.redis import SCRIPT

                loaded = client.script_load(SCRIPT) == SCRIPT_SHA
            version = client.get(version_key())
        except Exception as exc:
            self.stdout.write(self.style.ERROR(f"  unreachable: {type(exc).__name__}: {exc}"))
            raise CommandError("Redis is unreachable") from None
        self.stdout.write(f"  reachable: PING in {took:.1f} ms")
        self.stdout.write(f"  script {SCRIPT_SHA[:12]}: {'loaded' if loaded else 'not loaded (loads on first use)'}")
        self.stdout.write(f"  override version stamp: {version.decode() if version else 'unset'}")

    def _overrides(self) -> None:
        from django_gcra.models import LimitOverride

        self.stdout.write(self.style.MIGRATE_HEADING("Overrides in force"))
        now = timezone.now()
        try:
            active = list(LimitOverride.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now),
                                                       enabled=True))
        except Exception as exc:
            self.stdout.write(self.style.ERROR(f"  database unreachable: {exc}"))
            return
        if not active:
            self.stdout.write("  none")
        for o in active:
            expiry = f", expires {o.expires_at:%Y-%m-%d %H:%M}" if o.expires_at else ""
            self.stdout.write(f"  - {o}: mode {o.mode}, rate {o.rate or 'as configured'}, "
                              f"burst {o.burst if o.burst is not None else 'as configured'}{expiry}")
