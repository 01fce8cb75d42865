from django.apps import AppConfig


class DjangoRatelimitConfig(AppConfig):
    """Optional, as django-ratelimit's: in INSTALLED_APPS it adds the cache checks."""

    name = "django_gcra.compat.django_ratelimit"
    label = "django_gcra_ratelimit"  # not django-ratelimit's "ratelimit", so both can be installed
    default = True

    def ready(self):
        from . import checks  # noqa: F401
