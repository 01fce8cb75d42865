from django.core.exceptions import PermissionDenied

__all__ = ["Ratelimited"]


class Ratelimited(PermissionDenied):
    """Raised by a blocking ``@ratelimit``; a PermissionDenied, so Django answers 403
    (or ``RATELIMIT_VIEW`` through ``middleware.RatelimitMiddleware``), as django-ratelimit."""
