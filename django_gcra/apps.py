from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DjangoGCRAConfig(AppConfig):
    name = "django_gcra"
    verbose_name = _("Rate limiting")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
