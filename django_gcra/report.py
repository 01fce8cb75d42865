"""The shadow report: who would have been denied, by policy, limit and key, over a period."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Max, Min, Sum
from django.utils import timezone

from .models import AuditEvent

# period -> (length, bucket width, label)
PERIODS: dict[str, tuple[datetime.timedelta, datetime.timedelta, str]] = {
    "1h": (datetime.timedelta(hours=1), datetime.timedelta(minutes=1), "last hour, per minute"),
    "24h": (datetime.timedelta(days=1), datetime.timedelta(hours=1), "last 24 hours, per hour"),
    "7d": (datetime.timedelta(days=7), datetime.timedelta(hours=6), "last 7 days, per 6 hours"),
    "30d": (datetime.timedelta(days=30), datetime.timedelta(days=1), "last 30 days, per day"),
}
DEFAULT_PERIOD = "24h"
CHART_WIDTH, CHART_HEIGHT = 720, 160
MAX_KEYS = 200


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    start: datetime.datetime
    count: int


def shadow_report(period: str = DEFAULT_PERIOD, policy: str = "", outcome: str = "shadow_denied",
                  now: datetime.datetime | None = None) -> dict[str, Any]:
    """Context for the report page: the keys table and the chart's bars."""
    period = period if period in PERIODS else DEFAULT_PERIOD
    length, width, label = PERIODS[period]
    now = now or timezone.now()
    since = now - length
    events = AuditEvent.objects.filter(outcome=outcome, time__gte=since, time__lte=now)
    if policy:
        events = events.filter(policy=policy)
    keys = list(events.values("policy", "limit", "key")
                .annotate(total=Sum("count"), rows=Count("id"), first=Min("time"), last=Max("last_time"),
                          worst=Max("retry_after"))
                .order_by("-total", "policy", "limit", "key")[:MAX_KEYS])
    buckets = [0] * int(length / width)
    for time, count in events.values_list("time", "count").iterator():
        index = min(len(buckets) - 1, int((time - since) / width))
        buckets[index] += count
    peak = max(buckets) or 1
    step = CHART_WIDTH / len(buckets)
    bars = [Bar(x=round(i * step, 2), y=round(CHART_HEIGHT - CHART_HEIGHT * c / peak, 2), width=round(step * 0.9, 2),
                height=round(CHART_HEIGHT * c / peak, 2), start=since + i * width, count=c)
            for i, c in enumerate(buckets)]
    return {
        "period": period, "periods": [(k, v[2]) for k, v in PERIODS.items()], "period_label": label,
        "policy": policy, "policies": sorted(AuditEvent.objects.filter(outcome=outcome)
                                             .values_list("policy", flat=True).distinct()),
        "outcome": outcome, "since": since, "until": now, "keys": keys, "total": sum(buckets), "peak": max(buckets),
        "bars": bars, "chart_width": CHART_WIDTH, "chart_height": CHART_HEIGHT,
    }
