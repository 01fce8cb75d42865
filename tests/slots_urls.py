"""A slow view that measures, inside itself, how many requests of its key are in flight
across every server process (a Redis counter beside the limiter's keys), and a health check."""

from __future__ import annotations

import os
import time

import redis
from django.http import HttpResponse, JsonResponse
from django.urls import path

_probe = redis.Redis.from_url(os.environ["SLOTS_REDIS_URL"])
# Count this request in, and keep the peak: atomic across processes.
_enter = _probe.register_script("""
local n = redis.call('INCR', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
return n
""")


def slow(request, scope: str):
    key = request.headers.get("X-Tenant", "") if scope == "slow" else "all"
    _enter(keys=[f"probe:in:{scope}:{key}", f"probe:peak:{scope}:{key}"])
    try:
        time.sleep(float(request.GET.get("s", "0.2")))
    finally:
        _probe.decr(f"probe:in:{scope}:{key}")
    return HttpResponse("ok")


def health(request):
    return JsonResponse({"ok": True})


urlpatterns = [
    path("slow/", slow, {"scope": "slow"}),
    path("cap/", slow, {"scope": "cap"}),
    path("health/", health),
]
