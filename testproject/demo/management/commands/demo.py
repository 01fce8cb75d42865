"""Print a short trace of requests to each demo endpoint: allowed, then limited."""

import json

from django.core.management.base import BaseCommand
from django.test import Client

DEMO_ADDR = "192.0.2.10"


def shadow_note(response):
    """What the shadow-mode endpoint says: the request proceeded, and what enforcing would have done."""
    try:
        body = json.loads(response.content)
    except ValueError:
        return ""
    if "would_have_been_denied" not in body:
        return ""
    if body["would_have_been_denied"]:
        return f"  shadow: would have been denied (retry after {body['would_retry_after']:.1f} s); served anyway"
    return f"  shadow: within the limit (remaining {body['remaining']})"


class Command(BaseCommand):
    help = "Send a burst of requests to the demo endpoints and print what the limiter answered."

    def add_arguments(self, parser):
        parser.add_argument("--requests", type=int, default=5)

    def handle(self, *args, requests, **options):
        # A documentation address (TEST-NET-1), not 127.0.0.1: the store is shared with the
        # server, and your browser's first visit should not find the burst already spent.
        client = Client(REMOTE_ADDR=DEMO_ADDR)
        # decide() in a view, @ratelimit, the middleware's ROUTES, a DRF throttle, shadow mode
        for url in ["/hello/", "/surfaces/decorator/", "/surfaces/mw/", "/surfaces/drf/anon/", "/preview/"]:
            self.stdout.write(self.style.MIGRATE_HEADING(f"GET {url} x{requests}"))
            for n in range(1, requests + 1):
                response = client.get(url)
                quota = {k: v for k, v in response.headers.items() if "ratelimit" in k.lower() or k == "Retry-After"}
                style = self.style.SUCCESS if response.status_code < 400 else self.style.WARNING
                self.stdout.write(style(f"  #{n}: {response.status_code}  {quota or ''}{shadow_note(response)}"))
