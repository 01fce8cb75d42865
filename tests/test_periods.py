"""Calendar periods (pure): the four period starts around any instant hold it, in zones
with DST changes at 02:00, at midnight (Santiago, Havana, Beirut), of half an hour (Lord
Howe), with a half-hour offset (Kolkata), and one that skipped a whole day (Apia, 2011)."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from django_gcra.periods import PERIODS, Calendar, zone_problem

ZONES = ["Europe/Paris", "America/Santiago", "America/Havana", "Asia/Beirut", "Australia/Lord_Howe",
         "Asia/Kolkata", "Pacific/Apia", "UTC"]


def us(year, month, day, hour=0):
    return int(datetime(year, month, day, hour, tzinfo=timezone.utc).timestamp()) * 1_000_000


@pytest.mark.parametrize("tz", ZONES)
@pytest.mark.parametrize("period", PERIODS)
def test_the_boundaries_hold_every_instant(tz, period):
    cal = Calendar(period, tz)
    t, end = (us(2011, 12, 1), us(2012, 2, 1)) if tz == "Pacific/Apia" else (us(2026, 1, 1), us(2027, 1, 1))
    while t < end:
        b = cal.bounds_for(t)
        assert b[0] < b[1] <= t < b[2] < b[3]
        if period != "hour":  # a period starts at a local midnight, or the first instant after a skipped one
            local = datetime.fromtimestamp(b[1] / 1e6, ZoneInfo(tz))
            assert local.hour in (0, 1) and local.minute in (0, 30) and local.second == 0
        t += 7 * 3_600_000_000 + 1_234_567


def test_zone_problems():
    assert zone_problem("Europe/Paris") is None
    assert "unknown" in zone_problem("Europe/Atlantis")
    assert zone_problem(None) is not None and zone_problem("") is not None
    with pytest.raises(ValueError):
        Calendar("fortnight", "UTC")
