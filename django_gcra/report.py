"""The shadow report: who would have been denied, by policy, limit and key, over a period,
with each key's share of its own traffic (``tally``'s counts of listed keys) and the CSV export."""

from __future__ import annotations

import csv
import datetime
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, Max, Min, Sum
from django.http import HttpResponse
from django.urls import reverse
from django.utils import timezone

from . import catalog, tally
from .forms import configured, match_lines
from .models import AuditEvent, LimitOverride

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
MAX_PATHS = 3
CSV_COLUMNS = ["policy", "limit", "key", "would_denied", "traffic", "share_percent", "limit_traffic", "in_force",
               "paths", "first", "last", "longest_retry_after_s"]


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    start: datetime.datetime
    count: int


def _in_force(policy: str, limit: str, descriptors: dict[str, str], index: dict[tuple[str, str], list[Any]]) -> str:
    """The limit in force for this key: the configured value, or the override that matches it."""
    config = catalog.find(policy)
    lim = next((x for x in config.limits if x.name == limit), None) if config else None
    if lim is None:
        return "not configured"
    values = configured(lim)
    rate = ", ".join(values["rates"].values())
    burst = values["burst"] or values["burst_default"]
    matching = [o for o in index.get((policy, limit), []) if all(descriptors.get(k) == v for k, v in o.match.items())]
    if matching:
        best = max(matching, key=lambda o: len(o.match))
        return (f"override #{best.pk}: rate {best.rate or rate}, burst {best.burst or burst}, {best.mode}")
    return f"{rate}, burst {burst}, {config.mode_of(lim) if config else ''}"


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
    error = ""
    try:
        traffic = tally.read_keys(since.timestamp(), now.timestamp())
        _, per_limit = tally.read(since.timestamp(), now.timestamp(), tally.HOUR)
    except Exception as exc:
        traffic, per_limit, error = {}, {}, f"{type(exc).__name__}: {exc}"
    index: dict[tuple[str, str], list[Any]] = {}
    for o in LimitOverride.objects.in_force():
        index.setdefault((o.policy, o.limit), []).append(o)
    audit_url = reverse("admin:django_gcra_auditevent_changelist")
    add_url = reverse("admin:django_gcra_limitoverride_add")
    paths: dict[tuple[str, str, str], list[str]] = {}
    who: dict[tuple[str, str, str], dict[str, str]] = {}
    shown = {(r["policy"], r["limit"], r["key"]) for r in keys}
    for p, lim, key, path, descriptors in events.values_list("policy", "limit", "key", "path", "descriptors"):
        ident = (p, lim, key)
        if ident in shown:
            who.setdefault(ident, descriptors if isinstance(descriptors, dict) else {})
            found = paths.setdefault(ident, [])
            if path and path not in found and len(found) < MAX_PATHS:
                found.append(path)
    for row in keys:
        ident = (row["policy"], row["limit"], row["key"])
        descriptors = who.get(ident, {})
        seen = traffic.get(ident)
        row["traffic"] = seen
        row["share"] = None if not seen else min(100.0, 100.0 * row["total"] / seen)
        row["limit_traffic"] = sum(sum(v) for (p, lim, o), v in per_limit.items()
                                   if (p, lim, o) == (row["policy"], row["limit"], "seen"))
        row["in_force"] = _in_force(row["policy"], row["limit"], descriptors, index)
        row["paths"] = paths.get(ident, [])
        row["audit_url"] = audit_url + "?" + urlencode({"outcome": outcome, "policy": row["policy"],
                                                        "limit": row["limit"], "q": row["key"]})
        row["override_url"] = add_url + "?" + urlencode({"policy": row["policy"], "limit": row["limit"],
                                                         "match": match_lines(descriptors), "mode": "enforce",
                                                         "reason": f"from the shadow report: {row['key']}"})
    buckets = [0] * int(length / width)
    for time, count in events.values_list("time", "count").iterator():
        index_ = min(len(buckets) - 1, int((time - since) / width))
        buckets[index_] += count
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
        "bars": bars, "chart_width": CHART_WIDTH, "chart_height": CHART_HEIGHT, "error": error,
        "csv_url": "?" + urlencode({"period": period, "policy": policy, "format": "csv"}),
    }


def report_csv(period: str = DEFAULT_PERIOD, policy: str = "") -> HttpResponse:
    """The report's keys table as CSV (times in UTC, ISO 8601)."""
    report = shadow_report(period, policy)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="shadow-report-{report["period"]}.csv"'
    writer = csv.writer(response)
    writer.writerow(CSV_COLUMNS)
    for row in report["keys"]:
        writer.writerow([row["policy"], row["limit"], row["key"], row["total"],
                         "" if row["traffic"] is None else row["traffic"],
                         "" if row["share"] is None else f"{row['share']:.1f}", row["limit_traffic"],
                         row["in_force"], " ".join(row["paths"]), row["first"].isoformat(), row["last"].isoformat(),
                         "" if row["worst"] is None else f"{row['worst']:.3f}"])
    return response
