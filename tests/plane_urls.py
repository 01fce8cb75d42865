"""URLs for the policy-plane tests: the admin, one endpoint per kind of limit (a settings
policy, an inline ``@ratelimit`` limit, a DRF scope)."""

from django.contrib import admin
from django.http import JsonResponse
from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from django_gcra import decide
from django_gcra.decorators import ratelimit
from django_gcra.http import too_many_requests
from django_gcra.throttling import GCRAScopedRateThrottle

#: The policy name of ``inline`` (``view.<module>.<qualname>.<rate label>``).
INLINE_POLICY = "view.tests.plane_urls.inline.3-per-60s-b2"


def limited(request):
    """Policy "browser" for the tenant in ?tenant=; the body says which burst is in force."""
    decision = decide("browser", {"tenant": request.GET.get("tenant", "acme")}, request=request)
    if not decision.allowed:
        return too_many_requests(decision)
    burst = decision.limits[0].burst if decision.limits else None
    return JsonResponse({"allowed": True, "burst": burst, "remaining": decision.remaining, "shadow": decision.shadow})


@ratelimit(key="ip", rate="3/m", burst=2)
def inline(request):
    """An inline limit; the body says which burst is in force."""
    d = request.ratelimit
    return JsonResponse({"burst": d.limits[0].burst if d.limits else None, "remaining": d.remaining,
                         "shadow": d.shadow})


class Uploads(APIView):
    """The DRF scope ``uploads`` (its rate in ``REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']``)."""

    throttle_classes = [GCRAScopedRateThrottle]
    throttle_scope = "uploads"

    def get(self, request):
        d = self.__dict__["_gcra_decisions"][0]  # the throttle's decision (GCRAThrottle._publish)
        return Response({"burst": d.limits[0].burst if d.limits else None, "remaining": d.remaining,
                         "shadow": d.shadow})


urlpatterns = [
    path("limited/", limited),
    path("inline/", inline),
    path("uploads/", Uploads.as_view()),
    path("admin/", admin.site.urls),
]
