from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save
from django.utils.translation import gettext_lazy as _


class DjangoGCRAConfig(AppConfig):
    name = "django_gcra"
    verbose_name = _("Rate limiting")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The system checks; override and access rule invalidation; and the observers of every decision
        # (the audit trail and metrics; the limiter knows neither).
        from . import audit, checks, invalidation, metrics, otel, region_demand, tally  # noqa: F401
        from .signals import notable_observers, observers

        override_model = self.get_model("LimitOverride")
        post_save.connect(invalidation.on_override_change, sender=override_model, dispatch_uid="gcra_override_save")
        post_delete.connect(invalidation.on_override_change, sender=override_model, dispatch_uid="gcra_override_delete")
        rule_model = self.get_model("AccessRule")  # the same stamp: the rules reload with the overrides
        post_save.connect(invalidation.on_override_change, sender=rule_model, dispatch_uid="gcra_access_rule_save")
        post_delete.connect(invalidation.on_override_change, sender=rule_model, dispatch_uid="gcra_access_rule_delete")
        observers[:] = [tally.on_decision]
        region_demand.observe_demand()  # and a region's demand, first, while REGIONS is set
        notable_observers[:] = [audit.on_decision, metrics.on_decision]
        otel.observe()  # OpenTelemetry's observers, only while DJANGO_GCRA["OTEL"] is True
