"""``gcra_inspect POLICY name=value ...``: what the limits hold for these descriptors, consuming nothing.

POLICY is any policy of the plane: one of ``POLICIES``, an inline ``@ratelimit`` limit
(``view.<module>.<qualname>.<rate>``) or a DRF scope (``drf.<scope>``); overrides in force
apply, as in a decision."""

from __future__ import annotations

import datetime
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_gcra import catalog
from django_gcra.algorithm import GCRA, QUOTA, composite
from django_gcra.backends import BackendError
from django_gcra.engine import current


class Command(BaseCommand):
    help = ("Peek at a policy's limits for some descriptor values: remaining units, the retry-after a request "
            "would get, and the stored TATs. Consumes nothing (cost=0). Descriptors not given are skipped, "
            "as a request without them would be.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("policy")
        parser.add_argument("descriptors", nargs="*", metavar="name=value")
        parser.add_argument("--cost", type=int, default=1, help="Cost of the hypothetical next request (default 1).")
        parser.add_argument("--json", dest="as_json", action="store_true", help="Print JSON instead of a table.")

    def handle(self, *args: Any, policy: str, descriptors: list[str], cost: int, as_json: bool, **options: Any) -> None:
        found = catalog.find(policy)
        if found is None:  # an inline @ratelimit limit is known once the URLconf's views are imported
            problems = catalog.discover()
            found = catalog.find(policy)
        if found is None:
            listed = ", ".join(sorted(catalog.policies())) or "none"
            raise CommandError(f"unknown rate-limit policy {policy!r} (known: {listed})"
                               + (f"; {problems}" if problems else ""))
        pol = found
        if cost < 0:
            raise CommandError(f"--cost must be >= 0, not {cost}")
        values: dict[str, Any] = {}
        known = pol.descriptors | {"tier"}
        for item in descriptors:
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise CommandError(f"descriptor {item!r} is not name=value")
            if name not in known:
                raise CommandError(f"policy {pol.name!r} uses no descriptor {name!r}; its descriptors: "
                                   f"{', '.join(sorted(pol.descriptors))}")
            values[name] = value
        skipped = sorted(d for d in pol.descriptors if d not in values)
        for name in skipped:
            values[name] = None
        try:
            p = current().plan(pol, values, 0)
        except (KeyError, TypeError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        backend = current().backend_for(pol)
        try:
            states = backend.read_states(p.specs) if p.specs else []
            outcome = backend.evaluate(p.specs, 0) if p.specs else None  # cost 0: reads, never writes
        except BackendError as exc:
            raise CommandError(f"the store is unreachable: {exc}") from None
        rows = []
        for i, (planned, spec) in enumerate(zip(p.limits, p.specs, strict=True)):
            assert outcome is not None  # there are specs
            state = states[i]
            quota = None
            if spec.algorithm == QUOTA:  # its use in the period that holds the store's now
                a: Any = spec.calendar.bounds_for(outcome.now)
                used = state[1] if state is not None and state[0] == a[1] else 0
                quota = {"used": used, "quota": spec.burst, "period": spec.calendar.period, "tz": spec.calendar.tz,
                         "period_start": _iso(a[1], spec.calendar.zone), "period_end": _iso(a[2], spec.calendar.zone)}
            else:
                a = spec.period if spec.algorithm else spec.interval
            nxt = composite([state], outcome.now, [(spec.algorithm, a, spec.burst, True)], cost)
            tat = state if spec.algorithm == GCRA else None
            rows.append({"quota": quota,
                "limit": planned.limit.name, "key": spec.key, "rate": str(planned.rate), "burst": planned.burst,
                "algorithm": planned.limit.algorithm, "mode": planned.mode, "tat": tat,
                "state": None if spec.algorithm == GCRA or state is None else list(state),
                "tat_ahead_s": None if tat is None else round((tat - outcome.now) / 1e6, 6),
                "remaining": outcome.remaining[i], "reset_after_s": round(outcome.reset_after[i] / 1e6, 6),
                "retry_after_s": None if nxt.retry_after is None else round(nxt.retry_after / 1e6, 6),
            })
        result = {"policy": pol.name, "mode": pol.mode, "cost": cost, "skipped": skipped, "limits": rows}
        if as_json:
            self.stdout.write(json.dumps(result, indent=2, sort_keys=True))
        else:
            self._table(result)

    def _table(self, result: dict[str, Any]) -> None:
        self.stdout.write(f"policy {result['policy']} (mode {result['mode']}); "
                          f"retry-after is for cost {result['cost']}")
        if result["skipped"]:
            self.stdout.write(f"no value for: {', '.join(result['skipped'])} (limits using them are skipped)")
        if not result["limits"]:
            self.stdout.write("no limit applies to these descriptors")
        for row in result["limits"]:
            if row["quota"] is not None:
                self._quota_row(row)
                continue
            if row["algorithm"] != "gcra":
                self._sliding_row(row)
                continue
            tat = "absent (rested)" if row["tat"] is None else f"{row['tat']} (+{row['tat_ahead_s']:.3f}s)"
            retry = "never (cost > burst)" if row["retry_after_s"] is None else f"{row['retry_after_s']:.3f}s"
            self.stdout.write(
                f"- {row['limit']} [{row['mode']}] {row['rate']} burst {row['burst']}\n"
                f"    key         {row['key']}\n    stored TAT  {tat}\n"
                f"    remaining   {row['remaining']}\n    reset in    {row['reset_after_s']:.3f}s\n"
                f"    retry-after {retry}")

    def _quota_row(self, row: dict[str, Any]) -> None:
        q = row["quota"]
        retry = "never (cost > quota)" if row["retry_after_s"] is None else f"{row['retry_after_s']:.3f}s"
        self.stdout.write(
            f"- {row['limit']} [{row['mode']}] quota {q['quota']} per {q['period']} ({q['tz']})\n"
            f"    key         {row['key']}\n"
            f"    period      {q['period_start']} to {q['period_end']}\n"
            f"    used        {q['used']} of {q['quota']}\n    remaining   {row['remaining']}\n"
            f"    retry-after {retry}")

    def _sliding_row(self, row: dict[str, Any]) -> None:
        state = row["state"]
        if state is None:
            held = "absent (rested)"
        elif row["algorithm"] == "sliding_log":
            held = f"{len(state)} entries (the log keeps those in the window)"
        else:
            held = f"window from {state[0]}: {state[1]} units, {state[2]} in the window before"
        retry = "never (cost > N)" if row["retry_after_s"] is None else f"{row['retry_after_s']:.3f}s"
        self.stdout.write(
            f"- {row['limit']} [{row['mode']}] {row['algorithm']} {row['rate']} (N {row['burst']})\n"
            f"    key         {row['key']}\n    stored      {held}\n"
            f"    remaining   {row['remaining']}\n    next unit in {row['reset_after_s']:.3f}s\n"
            f"    retry-after {retry}")


def _iso(us: int, zone: Any) -> str:
    return datetime.datetime.fromtimestamp(us / 1e6, zone).isoformat()
