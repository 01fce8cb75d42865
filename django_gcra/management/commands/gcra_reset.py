"""``gcra_reset POLICY name=value ... [--limit NAME]``: unblock a caller now.

Clears the stored state of the policy's limits for those descriptor values (rate, quota and
concurrency state alike), in every region's store; another process's lease of those keys
runs out within its ``ttl``. POLICY is any policy of the plane, as for ``gcra_inspect``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_gcra.reset import reset


class Command(BaseCommand):
    help = ("Clear a policy's stored limit state for some descriptor values (every limit whose descriptors are "
            "given, or only --limit), in every region's store: the caller is no longer limited.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("policy")
        parser.add_argument("descriptors", nargs="*", metavar="name=value")
        parser.add_argument("--limit", help="Clear only this limit of the policy.")

    def handle(self, *args: Any, policy: str, descriptors: list[str], limit: str | None, **options: Any) -> None:
        values: dict[str, str] = {}
        for item in descriptors:
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise CommandError(f"descriptor {item!r} is not name=value")
            values[name] = value
        try:
            cleared = reset(policy, values, limit=limit)
        except KeyError as exc:
            raise CommandError(exc.args[0]) from None
        except (TypeError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        except Exception as exc:  # the store: a clear message, not a traceback
            raise CommandError(f"the store did not answer: {type(exc).__name__}: {exc}") from None
        what = f"limit {limit!r} of policy {policy!r}" if limit else f"policy {policy!r}"
        given = ", ".join(f"{k}={v}" for k, v in sorted(values.items())) or "no descriptors"
        self.stdout.write(f"cleared {cleared} key(s) of {what} for {given}")
