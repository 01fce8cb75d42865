"""``gcra_prune_audit``: delete audit rows older than the retention period."""

from __future__ import annotations

import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from django_gcra.conf import get_settings
from django_gcra.models import AuditEvent


class Command(BaseCommand):
    help = "Delete AuditEvent rows whose last request is older than DJANGO_GCRA['AUDIT']['RETENTION_DAYS']."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=float, help="Keep this many days instead of the setting.")
        parser.add_argument("--dry-run", action="store_true", help="Count, delete nothing.")

    def handle(self, *args: Any, days: float | None, dry_run: bool, **options: Any) -> None:
        days = get_settings().audit.retention_days if days is None else days
        if isinstance(days, bool) or not isinstance(days, (int, float)) or days < 0:
            raise CommandError(f"retention must be a number of days >= 0, not {days!r}")
        cutoff = timezone.now() - datetime.timedelta(days=days)
        old = AuditEvent.objects.filter(last_time__lt=cutoff)
        if dry_run:
            self.stdout.write(f"{old.count()} audit rows older than {cutoff:%Y-%m-%d %H:%M} would be deleted")
            return
        deleted, _ = old.delete()
        self.stdout.write(f"deleted {deleted} audit rows older than {cutoff:%Y-%m-%d %H:%M}")
