"""Views of the served site, and the middleware that lets tests see what the server saw."""

from __future__ import annotations

import time

from django.http import JsonResponse
from django_redis import get_redis_connection

from django_gcra.decorators import ratelimit


def arrivals(get_response):
    """Stamp every response, 429s included, with the server's arrival time of its request
    (``X-Arrived-At``, Unix seconds), and count the requests of a run (``X-Run``) in Redis:
    ``site:<run>:received``, ``site:<run>:admitted`` and ``site:<run>:<METHOD>``."""

    def middleware(request):
        arrived = time.time()
        response = get_response(request)
        response["X-Arrived-At"] = f"{arrived:.6f}"
        run = request.headers.get("X-Run")
        if run:
            pipe = get_redis_connection("default").pipeline(transaction=False)
            pipe.incr(f"site:{run}:received")
            pipe.incr(f"site:{run}:{request.method}")
            if response.status_code < 400:
                pipe.incr(f"site:{run}:admitted")
            pipe.execute()
        return response

    return middleware


def health(request):
    return JsonResponse({"ok": True})


def _cost(request) -> int:
    return int(request.GET.get("cost", "1"))


@ratelimit(policy="tight", cost=_cost)
def tight(request):
    """1/s, burst 1, per X-Client; ``?cost=2`` can never be admitted (429 without Retry-After)."""
    return JsonResponse({"ok": True, "method": request.method, "body": request.body.decode()})


@ratelimit(policy="minute")
def minute(request):
    """1/m, burst 1, per X-Client: a second request is told to wait about 60 s."""
    return JsonResponse({"ok": True})


@ratelimit(policy="storm")
def storm(request):
    """The retry-storm endpoint: one limit shared by every client of a run (X-Run)."""
    return JsonResponse({"ok": True})
