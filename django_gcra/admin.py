"""Admin for the policy plane: overrides and access rules (hot-reloaded on save), the audit trail, the shadow
report and the dashboard. Lists are laid out for a 1280 px window: short labels, the
columns an operator reads, times to the second with the time zone."""

from __future__ import annotations

import math
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from . import catalog, invalidation
from .dashboard import dashboard, reset_key
from .forms import AccessRuleForm, LimitOverrideForm, configured
from .models import AccessRule, AuditEvent, Dashboard, LimitOverride
from .override_rules import override_problem
from .report import report_csv, shadow_report

OUTCOME_LABELS = {"denied": _("denied"), "shadow_denied": _("shadow"), "fallback_denied": _("fallback"),
                  "blocked": _("blocked"), "reset": _("reset")}
CONSOLE_CSS = "django_gcra/console.css"


def when(value: Any) -> str:
    """A time to the second, in the current time zone, with its name."""
    if value is None:
        return "-"
    return f"{timezone.localtime(value):%Y-%m-%d %H:%M:%S %Z}"


def seconds(value: float | None) -> str:
    """A retry-after for people: rounded up to a tenth of a second; ∞ when never satisfiable."""
    if value is None or math.isinf(value):
        return "∞"
    return f"{math.ceil(value * 10) / 10:.1f} s"


def in_force_state(obj: LimitOverride | AccessRule) -> str:
    """Disabled, in force (until when) or expired: an override's or an access rule's."""
    if not obj.enabled:
        return str(_("disabled"))
    if obj.expires_at is None:
        return str(_("yes"))
    if obj.expires_at <= timezone.now():
        return str(_("expired %(when)s") % {"when": when(obj.expires_at)})
    return str(_("until %(when)s") % {"when": when(obj.expires_at)})


class ActiveFilter(admin.SimpleListFilter):
    """In force (enabled and unexpired), expired or disabled: access rules and overrides."""

    title = _("in force")
    parameter_name = "active"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("in force")), ("expired", _("expired")), ("disabled", _("disabled"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "yes":
            return queryset.in_force()
        if self.value() == "expired":
            return queryset.filter(expires_at__lte=timezone.now())
        if self.value() == "disabled":
            return queryset.filter(enabled=False)
        return queryset


class OverrideActiveFilter(ActiveFilter):
    """``ActiveFilter``, where in force also means runnable (``override_problem``), and the
    overrides that cannot run."""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [*super().lookups(request, model_admin), ("broken", _("cannot run"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() in ("yes", "broken"):  # the limiter's rule: enabled, unexpired, and runnable
            catalog.discover()
            candidates = queryset.in_force() if self.value() == "yes" else queryset
            broken = [o.pk for o in candidates if override_problem(o) is not None]
            return candidates.exclude(pk__in=broken) if self.value() == "yes" else queryset.filter(pk__in=broken)
        return super().queryset(request, queryset)


def _bulk(description: str, **changes: Any) -> Any:
    """A bulk action that updates, then invalidates exactly as a save does."""

    def action(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
        count = queryset.update(changed_by=request.user, updated_at=timezone.now(), **changes)
        invalidation.invalidate()
        modeladmin.message_user(request, ngettext("%d override updated.", "%d overrides updated.", count) % count,
                                messages.SUCCESS)

    action.short_description = description  # type: ignore[attr-defined]
    action.__name__ = "make_" + "_".join(f"{k}_{v}" for k, v in changes.items())
    return action


def _configured_of(obj: LimitOverride) -> dict[str, Any] | None:
    policy = catalog.find(obj.policy)
    limit = next((lim for lim in policy.limits if lim.name == obj.limit), None) if policy else None
    return configured(limit) if limit else None


@admin.register(LimitOverride)
class LimitOverrideAdmin(admin.ModelAdmin):
    form = LimitOverrideForm
    change_form_template = "admin/django_gcra/limitoverride/change_form.html"
    list_display = ["__str__", "effect", "mode_label", "state", "by", "updated"]
    list_filter = [OverrideActiveFilter, "policy", "mode", "enabled", "limit"]
    list_select_related = ["changed_by"]
    search_fields = ["policy", "limit", "match", "reason", "rate"]
    readonly_fields = ["created_at", "updated_at", "changed_by"]
    fieldsets = [
        (None, {"fields": ["policy", "limit", "match"]}),
        (_("Effect"), {"fields": ["rate", "burst", "quota", "mode", "enabled", "expires_at"]}),
        (_("Why"), {"fields": ["reason", "changed_by", "created_at", "updated_at"]}),
    ]
    actions = [
        _bulk(_("Enable selected overrides"), enabled=True),
        _bulk(_("Disable selected overrides"), enabled=False),
        _bulk(_("Switch selected overrides to shadow mode"), mode=LimitOverride.Mode.SHADOW),
        _bulk(_("Switch selected overrides to enforce mode"), mode=LimitOverride.Mode.ENFORCE),
    ]

    class Media:
        css = {"all": [CONSOLE_CSS]}

    @admin.display(description=_("configured → override"))
    def effect(self, obj: LimitOverride) -> str:
        conf = _configured_of(obj)
        rate = ", ".join(conf["rates"].values()) if conf else "?"
        burst = (conf["burst"] or conf["burst_default"]) if conf else "?"
        if obj.quota is not None:  # a calendar quota: its units per period
            return f"quota {burst} → {obj.quota}"
        parts = [f"rate {rate} → {obj.rate}" if obj.rate else f"rate {rate}",
                 f"burst {burst} → {obj.burst}" if obj.burst is not None else f"burst {burst}"]
        if obj.quota is not None:
            parts.append(f"quota → {obj.quota}")
        return ", ".join(parts)

    @admin.display(description=_("mode"), ordering="mode")
    def mode_label(self, obj: LimitOverride) -> str:
        return str(obj.mode)  # enforce | shadow | off: the choices' long labels are for the form

    @admin.display(description=_("in force"), ordering="expires_at")
    def state(self, obj: LimitOverride) -> str:
        problem = override_problem(obj)
        if problem is not None:  # saved by other means than the form (the ORM, SQL), or the settings changed
            return str(format_html('<span class="gcra-not-in-force" title="{}">{}</span>', problem.reason,
                                   _("not in force: %(reason)s") % {"reason": problem.reason}))
        return in_force_state(obj)

    @admin.display(description=_("by"), ordering="changed_by")
    def by(self, obj: LimitOverride) -> str:
        return str(obj.changed_by) if obj.changed_by else "-"

    @admin.display(description=_("updated"), ordering="updated_at")
    def updated(self, obj: LimitOverride) -> str:
        return when(obj.updated_at)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        catalog.discover()  # the "in force" column knows the URLconf's inline limits and DRF's scopes
        return super().changelist_view(request, extra_context)

    def save_model(self, request: HttpRequest, obj: LimitOverride, form: Any, change: bool) -> None:
        obj.changed_by = request.user
        super().save_model(request, obj, form, change)  # post_save invalidates on commit

    def render_change_form(self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        form = context["adminform"].form
        context["gcra_limits"] = getattr(form, "limits_table", {})
        return super().render_change_form(request, context, *args, **kwargs)


@admin.register(AccessRule)
class AccessRuleAdmin(admin.ModelAdmin):
    """Exempt and deny rules: in force on every process within about a second of a save
    (the overrides' version stamp), never read from the database on the request path."""

    form = AccessRuleForm
    list_display = ["kind", "rule", "policy_label", "state", "by", "updated"]
    list_filter = [ActiveFilter, "kind", "descriptor", "policy", "enabled"]
    list_select_related = ["changed_by"]
    search_fields = ["value", "reason", "policy", "descriptor"]
    readonly_fields = ["created_at", "updated_at", "changed_by"]
    fieldsets = [
        (None, {"fields": ["kind", "policy", "descriptor", "value"]}),
        (_("In force"), {"fields": ["enabled", "expires_at"]}),
        (_("Why"), {"fields": ["reason", "changed_by", "created_at", "updated_at"]}),
    ]

    @admin.display(description=_("rule"), ordering="value")
    def rule(self, obj: AccessRule) -> str:
        return f"{obj.descriptor}={obj.value}"

    @admin.display(description=_("policy"), ordering="policy")
    def policy_label(self, obj: AccessRule) -> str:
        return obj.policy or str(_("every policy"))

    @admin.display(description=_("in force"), ordering="expires_at")
    def state(self, obj: AccessRule) -> str:
        return in_force_state(obj)

    by = LimitOverrideAdmin.by
    updated = LimitOverrideAdmin.updated

    def save_model(self, request: HttpRequest, obj: AccessRule, form: Any, change: bool) -> None:
        obj.changed_by = request.user
        super().save_model(request, obj, form, change)  # post_save reloads the rules on commit


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written by the limiter (or no rows at all): viewed, never added, changed or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """Read-only: rows are written by the audit flusher and removed by gcra_prune_audit."""

    change_list_template = "admin/django_gcra/auditevent/change_list.html"
    date_hierarchy = "time"
    list_display = ["first_seen", "outcome_label", "policy_limit", "key_short", "requests", "retry", "request_line"]
    list_display_links = ["first_seen"]
    list_filter = ["outcome", "policy", "limit", "method"]
    search_fields = ["key", "path", "policy", "limit"]
    list_per_page = 100

    class Media:
        css = {"all": [CONSOLE_CSS]}

    @admin.display(description=_("time"), ordering="time")
    def first_seen(self, obj: AuditEvent) -> str:
        return when(obj.time)

    @admin.display(description=_("outcome"), ordering="outcome")
    def outcome_label(self, obj: AuditEvent) -> str:
        label = OUTCOME_LABELS.get(obj.outcome, obj.outcome)
        return str(format_html('<span class="gcra-outcome gcra-{}" title="{}">{}</span>', obj.outcome,
                               obj.get_outcome_display(), label))

    @admin.display(description=_("limit"), ordering="policy")
    def policy_limit(self, obj: AuditEvent) -> str:
        return f"{obj.policy}.{obj.limit}" if obj.limit else obj.policy

    @admin.display(description=_("key"), ordering="key")
    def key_short(self, obj: AuditEvent) -> str:
        return str(format_html('<span class="gcra-key" title="{}">{}</span>', obj.key, obj.key))

    @admin.display(description=_("count"), ordering="count")
    def requests(self, obj: AuditEvent) -> str:
        """The requests of the row, and (in brackets) the units they asked when that is not one each."""
        return f"{obj.count}" if obj.cost == obj.count else f"{obj.count} ({obj.cost})"

    @admin.display(description=_("retry"), ordering="retry_after")
    def retry(self, obj: AuditEvent) -> str:
        return seconds(obj.retry_after)

    @admin.display(description=_("request"), ordering="path")
    def request_line(self, obj: AuditEvent) -> str:
        line = f"{obj.method} {obj.path}".strip()
        return str(format_html('<span class="gcra-path" title="{}">{}</span>', line, line))

    def get_urls(self) -> list[Any]:
        report = path("shadow-report/", self.admin_site.admin_view(self.shadow_report_view),
                      name="django_gcra_auditevent_shadow_report")
        return [report, *super().get_urls()]

    def shadow_report_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        period, policy = request.GET.get("period", ""), request.GET.get("policy", "")
        if request.GET.get("format") == "csv":
            return report_csv(period, policy)
        context = {
            **self.admin_site.each_context(request),
            **shadow_report(period, policy),
            "opts": self.model._meta,
            "title": _("Shadow report: who would have been denied"),
            "media": self.media,
        }
        return TemplateResponse(request, "admin/django_gcra/shadow_report.html", context)


@admin.register(Dashboard)
class DashboardAdmin(ReadOnlyAdmin):
    """The dashboard page (a proxy model, so it is listed under Rate limiting)."""

    class Media:
        css = {"all": [CONSOLE_CSS]}

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user: Any = request.user
        return bool(user.is_active and user.is_staff and (user.has_perm("django_gcra.view_dashboard")
                                                          or user.has_perm("django_gcra.view_auditevent")))

    def has_reset_permission(self, request: HttpRequest) -> bool:
        """May reset a caller's limits from the dashboard (permission ``django_gcra.reset_limit``)."""
        user: Any = request.user
        return bool(user.is_active and user.is_staff and user.has_perm("django_gcra.reset_limit"))

    def get_urls(self) -> list[Any]:
        info = self.model._meta.app_label, self.model._meta.model_name
        return [path("", self.admin_site.admin_view(self.changelist_view), name="%s_%s_changelist" % info),
                path("reset/", self.admin_site.admin_view(self.reset_view), name="%s_%s_reset" % info)]

    def reset_view(self, request: HttpRequest) -> HttpResponse:
        """POST (CSRF-checked by ``admin_view``): reset one listed key's limit, audited as ``reset``."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_reset_permission(request):
            raise PermissionDenied
        policy, limit, key = (request.POST.get(name, "") for name in ("policy", "limit", "key"))
        level, text = reset_key(policy, limit, key, request.user.get_username())
        self.message_user(request, text, level)
        period = request.POST.get("period", "")
        target = reverse("admin:django_gcra_dashboard_changelist")
        return HttpResponseRedirect(f"{target}?period={period}" if period else target)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            **dashboard(request.GET.get("period", "")),
            "can_reset": self.has_reset_permission(request),
            "opts": self.model._meta,
            "title": _("Rate limiting dashboard"),
            "media": self.media,
        }
        return TemplateResponse(request, "admin/django_gcra/dashboard.html", context)
