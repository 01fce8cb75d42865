"""The dashboard: per policy and limit, what the limiter decided over a period, drawn as inline SVG.

Counts come from ``tally`` (every process's decisions, per limit, in Redis); the top keys
from the audit trail, and the keys near their quota from the tally's bounded sample of
allowed decisions (see ``tally``), each with what it has left now (peeked); the breaker and
fallback state from this (the admin's) process.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from . import catalog, fallback, tally
from .engine import current
from .forms import configured
from .models import AuditEvent, LimitOverride
from .override_rules import override_problem
from .reset import reset

__all__ = ["PERIODS", "dashboard", "reset_key", "stacked_bars"]

# period -> (length in seconds, bucket width, label)
PERIODS: dict[str, tuple[int, int, str]] = {
    "1h": (3600, tally.MINUTE, "last hour, per minute"),
    "24h": (86400, tally.HOUR, "last 24 hours, per hour"),
}
DEFAULT_PERIOD = "1h"
#: The series of a chart, bottom to top, and the outcome labels each sums.
SERIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("allowed", ("allowed", "waited")),  # waited: allowed after waiting for a slot (shaping)
    ("shadow_denied", ("shadow_denied",)),
    ("denied", ("denied",)),
    ("fallback", ("fallback_allowed", "fallback_denied", "unavailable")),
)
#: Decided by an exempt or deny rule, without the store: counted per policy (limit blank), never as traffic.
ACCESS_OUTCOMES = ("exempt", "blocked")
WIDTH, HEIGHT, SMALL_HEIGHT = 720, 120, 36


@dataclass(frozen=True)
class Rect:
    series: str
    x: float
    y: float
    width: float
    height: float
    count: int
    start: datetime.datetime


@dataclass
class Row:
    policy: str
    limit: str
    mode: str
    rate: str
    burst: str
    overrides: int
    source: str = "settings"  # settings | inline (@ratelimit) | drf (a DRF scope) | code (a Policy built in code)
    counts: dict[str, int] = field(default_factory=dict)
    bars: list[Rect] = field(default_factory=list)

    @property
    def denied_share(self) -> float | None:
        seen = self.counts.get("seen", 0)
        return None if not seen else 100.0 * self.counts.get("denied", 0) / seen

    @property
    def shadow_share(self) -> float | None:
        seen = self.counts.get("seen", 0)
        return None if not seen else 100.0 * self.counts.get("shadow_denied", 0) / seen


def stacked_bars(buckets: list[int], series: dict[str, list[int]], width: float, height: float) -> list[Rect]:
    """One stacked bar per bucket (``series`` bottom to top), scaled to the tallest bucket."""
    if not buckets:
        return []
    totals = [sum(values[i] for values in series.values()) for i in range(len(buckets))]
    peak = max(totals) or 1
    step = width / len(buckets)
    rects = []
    for i, start in enumerate(buckets):
        y = height
        for name, values in series.items():
            h = height * values[i] / peak
            if values[i]:
                y -= h
                rects.append(Rect(name, round(i * step, 2), round(y, 2), round(max(step * 0.85, 1), 2), round(h, 2),
                                  values[i], datetime.datetime.fromtimestamp(start, datetime.timezone.utc)))
    return rects


def _sum(raw: dict[tuple[str, str, str], list[int]], policy: str | None, limit: str | None,
         outcomes: tuple[str, ...], n: int) -> list[int]:
    out = [0] * n
    for (p, lim, outcome), values in raw.items():
        if outcome in outcomes and (policy is None or p == policy) and (limit is None or lim == limit):
            for i, v in enumerate(values):
                out[i] += v
    return out


def _duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds:.0f} s"


def quota_now(row: dict[str, Any]) -> str:
    """What a listed key has left now on its limit, peeked (cost 0: nothing consumed, no
    decision observed); one script call per key, for the few keys the page lists. The
    key's descriptors are the row's (a near-quota key) or its audit row's."""
    config = catalog.find(row["policy"])
    found = row.get("descriptors")
    if found is None:
        found = (AuditEvent.objects.filter(policy=row["policy"], limit=row["limit"], key=row["key"])
                 .values_list("descriptors", flat=True).first())
    if config is None or not isinstance(found, dict):
        return ""
    values: dict[str, Any] = {name: found.get(name) for name in config.descriptors}
    try:
        engine = current()
        p = engine.plan(config, values, 0)
        index = next((i for i, planned in enumerate(p.limits) if planned.limit.name == row["limit"]), None)
        if index is None:
            return ""
        outcome = engine.backend_for(config).evaluate(p.specs, 0)
    except Exception as exc:  # the page stays up; the cell says why
        return f"? ({type(exc).__name__})"
    left, burst = outcome.remaining[index], p.limits[index].burst
    rested = outcome.reset_after[index] / 1e6
    calendar = p.limits[index].limit.calendar
    if calendar is not None:  # a calendar quota: its use in the current period
        return f"{burst - left} of {burst} used this {calendar.period}" + (
            f", new period in {_duration(rested)}" if rested > 0 else "")
    return f"{left} of {burst}" + (f", full in {rested:.1f} s" if left < burst else "")


def reset_key(policy: str, limit: str, key: str, actor: str) -> tuple[int, str]:
    """The dashboard's **Reset** of a listed key: ``reset()`` of that limit for the
    descriptors its audit rows recorded (never values sent by the browser), recorded as an
    ``AuditEvent`` of outcome ``reset`` by ``actor``. Returns a message level and text."""
    found = (AuditEvent.objects.filter(policy=policy, limit=limit, key=key)
             .exclude(outcome=AuditEvent.Outcome.RESET).values_list("descriptors", flat=True).first())
    if not isinstance(found, dict):
        return messages.ERROR, _("No audited key %(key)s for %(limit)s: nothing was reset.") % {
            "key": key, "limit": f"{policy}.{limit}"}
    try:
        cleared = reset(policy, found, limit=limit or None)
    except (KeyError, TypeError, ValueError) as exc:
        return messages.ERROR, _("Could not reset %(key)s: %(error)s") % {"key": key, "error": exc}
    except Exception as exc:  # the store did not answer: nothing is recorded as done
        return messages.ERROR, _("Could not reset %(key)s: the store did not answer (%(error)s).") % {
            "key": key, "error": f"{type(exc).__name__}: {exc}"}
    now = timezone.now()
    AuditEvent.objects.create(time=now, last_time=now, policy=policy, limit=limit, outcome=AuditEvent.Outcome.RESET,
                              key=key, descriptors=found, count=1, cost=0, retry_after=None, actor=actor[:150])
    return messages.SUCCESS, _("Reset %(limit)s for %(key)s (%(n)d key(s) cleared).") % {
        "limit": f"{policy}.{limit}", "key": key, "n": cleared}


def _row(policy: str, limit: str, mode: str, rate: str, burst: str, overrides: int, source: str,
         raw: dict[tuple[str, str, str], list[int]], buckets: list[Any]) -> Row:
    n = len(buckets)
    row = Row(policy, limit, mode, rate, burst, overrides, source=source)
    row.counts = {"seen": sum(_sum(raw, policy, limit, ("seen",), n))}
    series = {name: _sum(raw, policy, limit, outcomes, n) for name, outcomes in SERIES}
    row.counts.update({name: sum(v) for name, v in series.items()})
    row.bars = stacked_bars(buckets, series, WIDTH / 3, SMALL_HEIGHT)
    return row


def near_keys(since: float, now: float, error: str = "") -> list[dict[str, Any]]:
    """Keys close to their limit but not denied in the period: the tally's sample (see
    ``tally``), without the keys of the audit trail's period (those are *most limited*),
    each peeked for what it has left now. At most 10."""
    if error:
        return []
    try:
        sampled = tally.read_near(since, now, count=tally.NEAR_KEPT)
    except Exception:  # the counts above already say the store does not answer
        return []
    since_dt = datetime.datetime.fromtimestamp(since, datetime.timezone.utc)
    audited = set(AuditEvent.objects.filter(time__gte=since_dt, key__in={r["key"] for r in sampled})
                  .values_list("policy", "limit", "key"))
    near = [r for r in sampled if (r["policy"], r["limit"], r["key"]) not in audited][:10]
    for row in near:
        row["used"] = f"{row['share'] * 100:.0f} %"
        row["quota"] = quota_now(row)
    return near


def dashboard(period: str = DEFAULT_PERIOD, now: float | None = None) -> dict[str, Any]:
    """Context for the dashboard page."""
    period = period if period in PERIODS else DEFAULT_PERIOD
    length, width, label = PERIODS[period]
    now = time.time() if now is None else now
    since = now - length
    error = ""
    try:
        buckets, raw = tally.read(since, now, width)
    except Exception as exc:  # the page still shows the configuration, the audit trail and this process
        buckets, raw, error = [], {}, f"{type(exc).__name__}: {exc}"
    n = len(buckets)
    catalog.discover()  # the URLconf's inline limits and DRF's scopes, listed even before traffic
    in_force: dict[tuple[str, str], int] = {}
    not_in_force: list[dict[str, Any]] = []  # enabled and unexpired, but the limiter ignores them: each with the reason
    for override in LimitOverride.objects.in_force().order_by("policy", "limit", "pk"):
        problem = override_problem(override)
        if problem is None:
            in_force[(override.policy, override.limit)] = in_force.get((override.policy, override.limit), 0) + 1
        else:
            not_in_force.append({"override": override, "reason": problem.reason})
    rows = []
    for policy in catalog.policies().values():
        for limit in policy.limits:
            values = configured(limit)
            rate = ", ".join(r if not t else f"{t}: {r}" for t, r in values["rates"].items())
            burst = values["burst"] if values["burst"] is not None else values["burst_default"]
            rows.append(_row(policy.name, limit.name, policy.mode_of(limit), rate,
                             "" if burst is None else str(burst), in_force.get((policy.name, limit.name), 0),
                             catalog.origin(policy.name), raw, buckets))
        for slots in policy.concurrency:  # the rate column says what it bounds: requests in flight
            rate = _("%(max)s in flight (ttl %(ttl)s s)") % {"max": slots.max, "ttl": f"{slots.ttl:g}"}
            rows.append(_row(policy.name, slots.name, policy.mode_of(slots), rate, "", 0,
                             catalog.origin(policy.name), raw, buckets))
    # Limits decided but in no list: policies built in code by other means (a Policy passed to decide()).
    shown = {(r.policy, r.limit) for r in rows}
    for policy_name, limit_name in sorted({(p, lim) for p, lim, _outcome in raw if lim and (p, lim) not in shown}):
        rows.append(_row(policy_name, limit_name, "", "", "", 0, "code", raw, buckets))
    overall = {name: _sum(raw, None, None, outcomes, n) for name, outcomes in SERIES}
    since_dt = datetime.datetime.fromtimestamp(since, datetime.timezone.utc)
    top = list(AuditEvent.objects.filter(time__gte=since_dt).exclude(outcome=AuditEvent.Outcome.RESET)
               .values("policy", "limit", "key", "outcome").annotate(total=Sum("count"))
               .order_by("-total", "policy", "limit", "key")[:10])
    for row in top:
        row["quota"] = quota_now(row)
    near = near_keys(since, now, error)
    state = fallback.status()
    access: dict[str, dict[str, int]] = {}  # policy -> exempt and blocked counts
    for (policy_name, _limit, outcome), per_bucket in raw.items():
        total: int = sum(per_bucket)
        if outcome in ACCESS_OUTCOMES and total:
            counts = access.setdefault(policy_name, dict.fromkeys(ACCESS_OUTCOMES, 0))
            counts[outcome] += total
    return {
        "period": period, "periods": [(k, v[2]) for k, v in PERIODS.items()], "period_label": label,
        "since": since_dt, "until": datetime.datetime.fromtimestamp(now, datetime.timezone.utc),
        "rows": rows, "error": error, "series": [name for name, _ in SERIES],
        "totals": {**{name: sum(v) for name, v in overall.items()},
                   **{name: sum(_sum(raw, None, None, (name,), n)) for name in ACCESS_OUTCOMES}},
        "access": sorted(access.items()),
        "bars": stacked_bars(buckets, overall, WIDTH, HEIGHT), "chart_width": WIDTH, "chart_height": HEIGHT,
        "small_width": WIDTH / 3, "small_height": SMALL_HEIGHT,
        "top": top, "near": near, "not_in_force": not_in_force, "near_share": round(tally.NEAR_SHARE * 100),
        "breakers": state["breakers"], "fallback": state["fallback"],
        "process_totals": sorted(tally.tally.totals.items()), "now": timezone.now(),
    }
