"""Demo pages, one per surface: reload quickly to see the quota headers, then the 429."""

from django.http import HttpResponse, JsonResponse
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View
from rest_framework.response import Response
from rest_framework.views import APIView

from django_gcra.decorators import ratelimit
from django_gcra.throttling import GCRAAnonRateThrottle, PolicyThrottle

PAGES = [
    ("/surfaces/decorator/", "@ratelimit(key='ip', rate='5/m', burst=3) on a sync view"),
    ("/surfaces/async/", "the same on an async view (native asyncio Redis client)"),
    ("/surfaces/cbv/", "a class-based view through method_decorator, login policy on POST only"),
    ("/surfaces/soft/", "block=False: the view sees request.ratelimit and decides"),
    ("/surfaces/mw/", "RateLimitMiddleware: ROUTES maps ^/surfaces/mw/ to the 'routed' policy"),
    ("/surfaces/drf/anon/", "DRF GCRAAnonRateThrottle: DEFAULT_THROTTLE_RATES['anon'] = '10/5m'"),
    ("/surfaces/drf/policy/", "DRF PolicyThrottle with ratelimit_policy = 'api' (X-Tenant header picks the tenant)"),
]


def index(request):
    links = "".join(f'<li><a href="{url}">{url}</a> {text}</li>' for url, text in PAGES)
    return HttpResponse(f"<h1>django_gcra surfaces</h1><p>Reload quickly; send "
                        f"<code>Accept: application/problem+json</code> for RFC 9457 bodies.</p><ul>{links}</ul>")


@ratelimit(key="ip", rate="5/m", burst=3)
def decorated(request):
    return JsonResponse({"surface": "@ratelimit", "remaining": request.ratelimit.remaining})


@ratelimit(key="ip", rate="5/m", burst=3)
async def adecorated(request):
    return JsonResponse({"surface": "@ratelimit (async)", "remaining": request.ratelimit.remaining})


@method_decorator(ratelimit(key="ip", rate="5/m", burst=3, methods=["POST"]), name="dispatch")
class Login(View):
    def get(self, request):
        return HttpResponse("GET is not limited; POST is.")

    def post(self, request):
        return HttpResponse("posted")


@ratelimit(key="ip", rate="5/m", burst=3, block=False)
def soft(request):
    decision = request.ratelimit
    if not decision.allowed:
        return JsonResponse({"surface": "block=False", "note": "over the limit: served a cheaper answer",
                             "retry_after": decision.retry_after})
    return JsonResponse({"surface": "block=False", "remaining": decision.remaining})


def routed(request):
    return JsonResponse({"surface": "RateLimitMiddleware", "remaining": request.ratelimit.remaining})


class DRFAnon(APIView):
    throttle_classes = [GCRAAnonRateThrottle]

    def get(self, request):
        return Response({"surface": "GCRAAnonRateThrottle"})


class DRFPolicy(APIView):
    throttle_classes = [PolicyThrottle]
    ratelimit_policy = "api"

    def get(self, request):
        return Response({"surface": "PolicyThrottle"})


urlpatterns = [
    path("surfaces/", index, name="surfaces"),
    path("surfaces/decorator/", decorated, name="surfaces-decorator"),
    path("surfaces/async/", adecorated, name="surfaces-async"),
    path("surfaces/cbv/", Login.as_view(), name="surfaces-cbv"),
    path("surfaces/soft/", soft, name="surfaces-soft"),
    path("surfaces/mw/", routed, name="surfaces-mw"),
    path("surfaces/drf/anon/", DRFAnon.as_view(), name="surfaces-drf-anon"),
    path("surfaces/drf/policy/", DRFPolicy.as_view(), name="surfaces-drf-policy"),
]
