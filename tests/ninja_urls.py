"""A NinjaAPI mounted in a URLconf, throttled by django_gcra.ninja (tests/test_ninja.py)."""

from django.http import HttpResponse
from django.urls import path
from ninja import NinjaAPI, Router

from django_gcra.ninja import AnonRateThrottle, PolicyThrottle, UserRateThrottle, install

api = install(NinjaAPI(urls_namespace="gcra_ninja"))
plain = NinjaAPI(urls_namespace="gcra_ninja_plain", throttle=AnonRateThrottle("2/m"))  # without install()
tenants = Router()


@api.get("/anon", throttle=AnonRateThrottle("2/m"))
def anon(request):
    return {"ok": True}


@api.get("/anon-async", throttle=AnonRateThrottle("2/m"))
async def anon_async(request):
    return {"ok": True}


@api.get("/both", throttle=[AnonRateThrottle("5/m"), UserRateThrottle("1/m")])
def both(request):
    return {"ok": True}


@api.get("/policy/{name}")
def unthrottled(request, name: str):
    return {"name": name}


@tenants.get("/search")
def search(request):
    return {"ok": True}


@tenants.get("/trial", throttle=PolicyThrottle("ninja_trial"))
def trial(request):
    return {"ok": True}


@tenants.get("/fragile", throttle=PolicyThrottle("ninja_fragile"))
def fragile(request):
    return {"ok": True}


@tenants.get("/strict", throttle=PolicyThrottle("ninja_strict"))
def strict(request):
    return {"ok": True}


api.add_router("/tenants", tenants, throttle=PolicyThrottle("ninja_api", cost=2))


@plain.get("/plain")
def plain_view(request):
    return {"ok": True}


def teapot(request, decision):
    """A DENIED_VIEW: the project's quota headers are added to whatever it answers."""
    return HttpResponse("slow down", status=418)


urlpatterns = [path("api/", api.urls), path("plain/", plain.urls)]
