"""Views for the load-shedding tests: a gate the test opens, a stream, a failing view, a
health check, and a view whose latency grows with the requests in flight (measured inside
it), served by a real server in tests/test_shedding_load.py."""

from __future__ import annotations

import asyncio
import os
import threading
import time

from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path


class Gate:
    """Admitted requests wait here until the test opens it; the view counts them."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.inside = self.peak = 0

    def reset(self) -> None:
        self.event = asyncio.Event()
        self.inside = self.peak = 0


gate = Gate()


async def gated(request):
    gate.inside += 1
    gate.peak = max(gate.peak, gate.inside)
    try:
        await asyncio.wait_for(gate.event.wait(), timeout=10)
    finally:
        gate.inside -= 1
    return HttpResponse("ok")


def fast(request):
    return HttpResponse("ok")


def stream(request):
    return StreamingHttpResponse(iter([b"a", b"b", b"c"]))


def boom(request):
    raise RuntimeError("boom")


class Load:
    """In flight inside ``loaded`` (a thread-safe count and its peak)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = self.peak = 0


load = Load()
BASE = float(os.environ.get("SHED_BASE", "0.005"))  # seconds
PER_REQUEST = float(os.environ.get("SHED_K", "0.01"))  # seconds per request in flight


def loaded(request):
    """Sleeps BASE + PER_REQUEST * (requests in flight here): latency grows with load."""
    with load.lock:
        load.inside += 1
        load.peak = max(load.peak, load.inside)
        inside = load.inside
    try:
        time.sleep(BASE + PER_REQUEST * inside)
    finally:
        with load.lock:
            load.inside -= 1
    return HttpResponse("ok")


def peak(request):
    with load.lock:
        value = load.peak
        if request.GET.get("reset"):
            load.peak = 0
    return JsonResponse({"peak": value})


urlpatterns = [
    path("gated/", gated),
    path("fast/", fast),
    path("stream/", stream),
    path("boom/", boom),
    path("loaded/", loaded),
    path("health/", fast),
    path("health/peak/", peak),
]


def shed_stats(request):
    from django_gcra import shedding

    return JsonResponse(shedding.stats().__dict__)


urlpatterns.append(path("health/stats/", shed_stats))
