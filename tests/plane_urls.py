"""URLs for the policy-plane tests: the admin and one limited endpoint."""

from django.contrib import admin
from django.http import JsonResponse
from django.urls import path

from django_gcra import decide
from django_gcra.http import too_many_requests


def limited(request):
    """Policy "browser" for the tenant in ?tenant=; the body says which burst is in force."""
    decision = decide("browser", {"tenant": request.GET.get("tenant", "acme")}, request=request)
    if not decision.allowed:
        return too_many_requests(decision)
    burst = decision.limits[0].burst if decision.limits else None
    return JsonResponse({"allowed": True, "burst": burst, "remaining": decision.remaining, "shadow": decision.shadow})


urlpatterns = [
    path("limited/", limited),
    path("admin/", admin.site.urls),
]
