"""Views for the surface tests (used through ``pytest.mark.urls``, so the main test
URLconf, which the system checks walk, stays free of them)."""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View
from rest_framework.response import Response
from rest_framework.views import APIView

from django_gcra.decorators import ratelimit
from django_gcra.throttling import GCRAAnonRateThrottle, GCRAScopedRateThrottle, GCRAUserRateThrottle, PolicyThrottle


def plain(request):
    return HttpResponse("ok")


async def aplain(request):
    return HttpResponse("ok")


@ratelimit(key="ip", rate="5/m", burst=2)
def inline_sync(request):
    return HttpResponse("ok")


@ratelimit(key="ip", rate="5/m", burst=2)
async def inline_async(request):
    return HttpResponse("ok")


@ratelimit(key="ip", rate="1/s", burst=1, name="tight")
def tight(request):
    return HttpResponse("ok")


@ratelimit(policy="login", methods=["POST"])
def login(request):
    return HttpResponse("ok")


@ratelimit(key="ip", rate="5/m", burst=2, block=False)
def report(request):
    d = request.ratelimit
    return JsonResponse({"allowed": d.allowed, "remaining": d.remaining, "retry_after": d.retry_after})


@ratelimit(key="ip", rate="5/m", burst=2, block=False)
async def areport(request):
    d = request.ratelimit
    return JsonResponse({"allowed": d.allowed, "remaining": d.remaining})


@ratelimit(key="ip", rate="10/m", burst=10, cost=lambda request: int(request.GET.get("cost", "1")))
def costly(request):
    return HttpResponse("ok")


@ratelimit(key=["user"], rate="5/m", burst=1)
async def per_user(request):
    return HttpResponse("ok")


@ratelimit(policy="shadowed")
def shadowed(request):
    return HttpResponse("ok")


@method_decorator(ratelimit(key="ip", rate="5/m", burst=1), name="dispatch")
class SyncCBV(View):
    def get(self, request):
        return HttpResponse("ok")


@method_decorator(ratelimit(key="ip", rate="5/m", burst=1), name="dispatch")
class OtherSyncCBV(View):
    def get(self, request):
        return HttpResponse("ok")


class AsyncCBV(View):
    @method_decorator(ratelimit(key="ip", rate="5/m", burst=1))
    async def get(self, request):
        return HttpResponse("ok")


class AnonView(APIView):
    throttle_classes = [GCRAAnonRateThrottle]

    def get(self, request):
        return Response({"ok": True})


class UserView(APIView):
    throttle_classes = [GCRAUserRateThrottle]

    def get(self, request):
        return Response({"ok": True})


class ScopedView(APIView):
    throttle_classes = [GCRAScopedRateThrottle]
    throttle_scope = "uploads"

    def get(self, request):
        return Response({"ok": True})


class UnscopedView(APIView):
    throttle_classes = [GCRAScopedRateThrottle]

    def get(self, request):
        return Response({"ok": True})


class PolicyView(APIView):
    throttle_classes = [PolicyThrottle]
    ratelimit_policy = "api"

    def get(self, request):
        return Response({"ok": True})


class CostlyPolicyView(PolicyView):
    ratelimit_cost = 50


class BothView(APIView):
    throttle_classes = [PolicyThrottle, GCRAAnonRateThrottle]
    ratelimit_policy = "api"

    def get(self, request):
        return Response({"ok": True})


urlpatterns = [
    path("plain/", plain, name="plain"),
    path("aplain/", aplain, name="aplain"),
    path("api/ping/", plain, name="api-ping"),
    path("api/aping/", aplain, name="api-aping"),
    path("api/other/", plain, name="api-other"),
    path("unnamed/", plain),
    path("inline/", inline_sync, name="inline"),
    path("ainline/", inline_async, name="ainline"),
    path("tight/", tight, name="tight"),
    path("login/", login, name="login"),
    path("report/", report, name="report"),
    path("areport/", areport, name="areport"),
    path("costly/", costly, name="costly"),
    path("per-user/", per_user, name="per-user"),
    path("shadowed/", shadowed, name="shadowed"),
    path("cbv/", SyncCBV.as_view(), name="cbv"),
    path("cbv2/", OtherSyncCBV.as_view(), name="cbv2"),
    path("acbv/", AsyncCBV.as_view(), name="acbv"),
    path("drf/anon/", AnonView.as_view(), name="drf-anon"),
    path("drf/user/", UserView.as_view(), name="drf-user"),
    path("drf/scoped/", ScopedView.as_view(), name="drf-scoped"),
    path("drf/unscoped/", UnscopedView.as_view(), name="drf-unscoped"),
    path("drf/policy/", PolicyView.as_view(), name="drf-policy"),
    path("drf/costly/", CostlyPolicyView.as_view(), name="drf-costly"),
    path("drf/both/", BothView.as_view(), name="drf-both"),
]


def custom_denied(request, decision):
    """A DENIED_VIEW for the tests."""
    return HttpResponse(f"slow down ({decision.limit})", status=429, content_type="text/plain")


async def acustom_denied(request, decision):
    return HttpResponse(f"async slow down ({decision.limit})", status=429, content_type="text/plain")
