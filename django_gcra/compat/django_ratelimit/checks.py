"""django-ratelimit's cache checks, for a store that must be Redis (django-redis)."""

from django.conf import settings
from django.core import checks
from django.core.cache.backends.dummy import DummyCache
from django.utils.module_loading import import_string
from django_redis.cache import RedisCache

__all__ = ["check_caches"]

REDIS_BACKEND = "django_redis.cache.RedisCache"


def _backend_class(path):
    try:
        return import_string(path)
    except ImportError:
        return None


@checks.register(checks.Tags.caches)
def check_caches(app_configs, **kwargs):
    cache_name = getattr(settings, "RATELIMIT_USE_CACHE", "default")
    caches = getattr(settings, "CACHES", None)
    if caches is None:
        return [checks.Error("CACHES is not defined, django_gcra.compat.django_ratelimit will not work",
                             hint="Configure a django-redis cache.", id="django_gcra_ratelimit.E001")]
    if cache_name not in caches:
        return [checks.Error(f'RATELIMIT_USE_CACHE value "{cache_name}" does not appear in CACHES',
                             hint="RATELIMIT_USE_CACHE must name a django-redis cache.",
                             id="django_gcra_ratelimit.E002")]
    backend = caches[cache_name].get("BACKEND", "")
    cls = _backend_class(backend)
    if isinstance(cls, type) and issubclass(cls, DummyCache):
        return [checks.Warning(f"RATELIMIT_USE_CACHE {cache_name!r} is a DummyCache: nothing is counted and "
                               "nothing is limited (a zero rate apart)", id="django_gcra_ratelimit.W001")]
    if not (isinstance(cls, type) and issubclass(cls, RedisCache)):
        return [checks.Error(f"RATELIMIT_USE_CACHE {cache_name!r} has backend {backend}; decisions run on Redis",
                             hint=f"Use {REDIS_BACKEND}.", id="django_gcra_ratelimit.E003")]
    return []
