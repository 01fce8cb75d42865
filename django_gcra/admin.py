"""Admin for the policy plane: overrides (hot-reloaded on save), the audit trail, the shadow report."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from . import overrides
from .forms import LimitOverrideForm
from .models import AuditEvent, LimitOverride
from .report import shadow_report


class ActiveFilter(admin.SimpleListFilter):
    title = _("in force")
    parameter_name = "active"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("in force")), ("expired", _("expired")), ("disabled", _("disabled"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "yes":
            return queryset.in_force()  # type: ignore[attr-defined, no-any-return]
        if self.value() == "expired":
            return queryset.filter(expires_at__lte=timezone.now())
        if self.value() == "disabled":
            return queryset.filter(enabled=False)
        return queryset


def _bulk(description: str, **changes: Any) -> Any:
    """A bulk action that updates, then invalidates exactly as a save does."""

    def action(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
        count = queryset.update(changed_by=request.user, updated_at=timezone.now(), **changes)
        overrides.invalidate()
        modeladmin.message_user(request, ngettext("%d override updated.", "%d overrides updated.", count) % count,
                                messages.SUCCESS)

    action.short_description = description  # type: ignore[attr-defined]
    action.__name__ = "make_" + "_".join(f"{k}_{v}" for k, v in changes.items())
    return action


@admin.register(LimitOverride)
class LimitOverrideAdmin(admin.ModelAdmin):
    form = LimitOverrideForm
    list_display = ["__str__", "policy", "limit", "rate", "burst", "mode", "enabled", "expires_at", "changed_by",
                    "updated_at"]
    list_filter = [ActiveFilter, "policy", "mode", "enabled", "limit"]
    list_select_related = ["changed_by"]
    search_fields = ["policy", "limit", "match", "reason", "rate"]
    readonly_fields = ["created_at", "updated_at", "changed_by"]
    fieldsets = [
        (None, {"fields": ["policy", "limit", "match"]}),
        (_("Effect"), {"fields": ["rate", "burst", "mode", "enabled", "expires_at"]}),
        (_("Why"), {"fields": ["reason", "changed_by", "created_at", "updated_at"]}),
    ]
    actions = [
        _bulk(_("Enable selected overrides"), enabled=True),
        _bulk(_("Disable selected overrides"), enabled=False),
        _bulk(_("Switch selected overrides to shadow mode"), mode=LimitOverride.Mode.SHADOW),
        _bulk(_("Switch selected overrides to enforce mode"), mode=LimitOverride.Mode.ENFORCE),
    ]

    def save_model(self, request: HttpRequest, obj: LimitOverride, form: Any, change: bool) -> None:
        obj.changed_by = request.user
        super().save_model(request, obj, form, change)  # post_save invalidates on commit


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: rows are written by the audit flusher and removed by gcra_prune_audit."""

    change_list_template = "admin/django_gcra/auditevent/change_list.html"
    date_hierarchy = "time"
    list_display = ["time", "outcome", "policy", "limit", "key", "count", "cost", "retry_after", "method", "path"]
    list_filter = ["outcome", "policy", "limit", "method"]
    search_fields = ["key", "path", "policy", "limit"]
    list_per_page = 100

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[Any]:
        report = path("shadow-report/", self.admin_site.admin_view(self.shadow_report_view),
                      name="django_gcra_auditevent_shadow_report")
        return [report, *super().get_urls()]

    def shadow_report_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            from django.core.exceptions import PermissionDenied

            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            **shadow_report(request.GET.get("period", ""), request.GET.get("policy", "")),
            "opts": self.model._meta,
            "title": _("Shadow report: who would have been denied"),
        }
        return TemplateResponse(request, "admin/django_gcra/shadow_report.html", context)
