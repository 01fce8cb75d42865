"""django-ratelimit 4.1's API on django_gcra: replace ``django_ratelimit`` with
``django_gcra.compat.django_ratelimit`` in your imports and nothing else.

Each (group, rate, key, methods) is one GCRA limit of rate N/period and burst N, decided by
one script call on the Redis of ``RATELIMIT_USE_CACHE``; see
docs/howto/migrate-from-django-ratelimit.md for where that differs from a fixed window.
"""

VERSION = (4, 1, 0)  # the django-ratelimit API this package mirrors
__version__ = ".".join(map(str, VERSION))

ALL = (None,)  # Sentinel value for all HTTP methods.
UNSAFE = ["DELETE", "PATCH", "POST", "PUT"]
