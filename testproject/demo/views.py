from django.http import HttpResponse, JsonResponse

from django_gcra import decide
from django_gcra.http import too_many_requests


def index(request):
    links = "".join(f'<li><a href="{url}">{url}</a> {text}</li>' for url, text in [
        ("/hello/", "decide() called from a view: 5/m, burst 3, per IP"),
        ("/preview/", "a limit in shadow mode (never refused): see /admin/ > Audit events > Shadow report"),
        ("/surfaces/", "the three surfaces: @ratelimit, RateLimitMiddleware, DRF throttles"),
    ])
    return HttpResponse(f"<h1>django_gcra demo</h1><p>Reload a link quickly to be limited.</p><ul>{links}</ul>")


def hello(request):
    decision = decide("hello", {"ip": request.META.get("REMOTE_ADDR", "")}, request=request)
    if not decision.allowed:
        return too_many_requests(decision)
    response = JsonResponse({"hello": "world", "remaining": decision.remaining})
    for name, value in decision.headers().items():
        response[name] = value
    return response


def preview(request):
    """A shadow-mode policy: the request always proceeds; would-denies are audited."""
    decision = decide("preview", {"tenant": request.headers.get("X-Tenant", "demo-tenant")}, request=request)
    state = decision.limits[0] if decision.limits else None
    return JsonResponse({"allowed": decision.allowed, "would_have_been_denied": decision.shadow,
                         "would_retry_after": decision.would_retry_after,
                         "burst": state.burst if state else None, "remaining": decision.remaining})
