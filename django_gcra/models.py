"""The policy plane's models: admin-edited overrides and the audit trail."""

from __future__ import annotations

from typing import Any

import django
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from . import catalog
from .override_rules import override_problem

__all__ = ["AccessRule", "AuditEvent", "Dashboard", "LimitOverride"]

# CheckConstraint's argument: ``condition`` since Django 5.1 (``check`` before, and gone in 6.0).
CONSTRAINT_ARG = "condition" if django.VERSION >= (5, 1) else "check"


class LimitOverrideQuerySet(models.QuerySet["LimitOverride"]):
    def in_force(self) -> LimitOverrideQuerySet:
        """Enabled and not expired: the overrides the limiter applies (one rule, used
        by the limiter, the admin's filter and ``gcra_status``)."""
        found: LimitOverrideQuerySet = self.filter(enabled=True).exclude(expires_at__lte=timezone.now())
        return found


RULE_FIELDS = frozenset({"policy", "limit", "match", "rate", "burst", "quota"})  # what override_problem reads


class LimitOverride(models.Model):
    """Override one limit of one policy for the requests whose descriptors match.

    ``match`` maps descriptor names to values, e.g. ``{"tenant": "acme"}``; an empty
    match applies to every request. The most specific enabled, unexpired match wins.
    A blank rate or burst keeps the configured (or tier) value.
    """

    class Mode(models.TextChoices):
        ENFORCE = "enforce", _("enforce")
        SHADOW = "shadow", _("shadow (log would-denies, never deny)")
        OFF = "off", _("off (skip this limit)")

    policy = models.CharField(_("policy"), max_length=64, db_index=True)
    limit = models.CharField(_("limit"), max_length=64)
    match = models.JSONField(_("descriptor match"), default=dict, blank=True,
                             help_text=_('Descriptor values this override applies to, e.g. {"tenant": "acme"}. '
                                         "Empty: every request."))
    rate = models.CharField(_("rate"), max_length=32, blank=True,
                            help_text=_("e.g. 100/s or 6000/m. Blank keeps the configured (tier) rate."))
    burst = models.PositiveIntegerField(_("burst"), null=True, blank=True, validators=[MinValueValidator(1)],
                                        help_text=_("Blank keeps the configured burst (or the rate's count)."))
    quota = models.PositiveBigIntegerField(_("quota"), null=True, blank=True, validators=[MinValueValidator(1)],
                                           help_text=_("Calendar quotas only: units per period. Blank keeps the "
                                                       "configured (tier) quota."))
    mode = models.CharField(_("mode"), max_length=8, choices=Mode.choices, default=Mode.ENFORCE)
    enabled = models.BooleanField(_("enabled"), default=True)
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True,
                                      help_text=_("After this time the override no longer applies."))
    reason = models.TextField(_("reason"), blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    changed_by = models.ForeignKey(settings.AUTH_USER_MODEL, verbose_name=_("changed by"), null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")

    objects = LimitOverrideQuerySet.as_manager()

    class Meta:
        verbose_name = _("limit override")
        verbose_name_plural = _("limit overrides")
        ordering = ["policy", "limit", "-updated_at"]
        constraints = [  # whatever writes the row (admin, ORM, SQL), a burst of 0 would deny everyone
            models.CheckConstraint(**{CONSTRAINT_ARG: models.Q(burst__isnull=True) | models.Q(burst__gte=1)},
                                   name="gcra_override_burst_positive"),
        ]

    def __str__(self) -> str:
        if isinstance(self.match, dict):
            match = ", ".join(f"{k}={v}" for k, v in sorted(self.match.items(), key=str)) or "*"
        else:  # (written without validation: shown as it is, never a crash of the list that says so)
            match = repr(self.match)
        return f"{self.policy}.{self.limit} [{match}]"

    def full_clean(self, exclude: Any = None, validate_unique: bool = True, validate_constraints: bool = True) -> None:
        """Django's validation, then the rule the limiter loads overrides by
        (``override_rules.override_problem``): an override it would ignore is refused here,
        so the admin form never saves one. Skipped when a field it reads is excluded or
        already in error (a form reports those first)."""
        errors: dict[str, Any] = {}
        try:
            super().full_clean(exclude, validate_unique, validate_constraints)
        except ValidationError as exc:
            errors = exc.update_error_dict(errors)
        if not (set(exclude or ()) | set(errors)) & RULE_FIELDS:
            catalog.discover()  # the URLconf's inline limits and DRF's scopes are overridable too
            problem = override_problem(self)
            if problem is not None:
                errors[problem.field] = [problem.reason]
        if errors:
            raise ValidationError(errors)


class AuditEvent(models.Model):
    """Denials and shadow would-denies, coalesced per (policy, limit, key, outcome) per
    flush interval: ``count`` requests between ``time`` and ``last_time``."""

    class Outcome(models.TextChoices):
        DENIED = "denied", _("denied")
        SHADOW_DENIED = "shadow_denied", _("shadow: would have been denied")
        FALLBACK_DENIED = "fallback_denied", _("denied by the local fallback")
        BLOCKED = "blocked", _("blocked by a deny rule")
        RESET = "reset", _("reset by an operator")

    time = models.DateTimeField(_("time"), db_index=True, help_text=_("The first request of this row."))
    last_time = models.DateTimeField(_("last time"), help_text=_("The last request of this row."))
    policy = models.CharField(_("policy"), max_length=64)
    limit = models.CharField(_("limit"), max_length=64)
    outcome = models.CharField(_("outcome"), max_length=16, choices=Outcome.choices)
    key = models.CharField(_("key"), max_length=255, help_text=_("The identifying descriptors, name=value."))
    descriptors = models.JSONField(_("descriptors"), default=dict, blank=True)
    count = models.PositiveIntegerField(_("count"), default=1)
    cost = models.PositiveBigIntegerField(_("cost"), default=1, help_text=_("Units asked by these requests, summed."))
    retry_after = models.FloatField(_("retry after (s)"), null=True, blank=True,
                                    help_text=_("The longest retry-after seen; empty when never satisfiable."))
    method = models.CharField(_("method"), max_length=16, blank=True)
    path = models.CharField(_("path"), max_length=255, blank=True)
    actor = models.CharField(_("by"), max_length=150, blank=True,
                             help_text=_("The operator who did it (outcome reset)."))

    class Meta:
        verbose_name = _("audit event")
        verbose_name_plural = _("audit events")
        ordering = ["-time"]
        indexes = [models.Index(fields=["outcome", "time"], name="gcra_audit_outcome_time")]

    def __str__(self) -> str:
        return f"{self.outcome} {self.policy}.{self.limit} {self.key} x{self.count}"


class Dashboard(AuditEvent):
    """No table of its own: the admin's dashboard page, a proxy so that it is listed (and
    permissioned) under *Rate limiting* beside the overrides and the audit trail."""

    class Meta:
        proxy = True
        verbose_name = _("dashboard")
        verbose_name_plural = _("dashboard")
        permissions = [("reset_limit", _("Can reset a caller's limits"))]


class AccessRuleQuerySet(models.QuerySet["AccessRule"]):
    def in_force(self) -> AccessRuleQuerySet:
        """Enabled and not expired: the rules the limiter applies."""
        found: AccessRuleQuerySet = self.filter(enabled=True).exclude(expires_at__lte=timezone.now())
        return found


class AccessRule(models.Model):
    """An admin-edited exemption or deny rule: requests whose ``descriptor`` is ``value``
    (for ``ip``: an address or a CIDR network) are exempt from, or denied by, ``policy``
    (blank: every policy)."""

    class Kind(models.TextChoices):
        EXEMPT = "exempt", _("exempt (never limited)")
        DENY = "deny", _("deny (refused with 403)")

    kind = models.CharField(_("kind"), max_length=8, choices=Kind.choices)
    policy = models.CharField(_("policy"), max_length=64, blank=True, db_index=True,
                              help_text=_("Blank: every policy."))
    descriptor = models.CharField(_("descriptor"), max_length=64, help_text=_("e.g. ip, user, tenant."))
    value = models.CharField(_("value"), max_length=255,
                             help_text=_("The descriptor's value; for ip an address or a CIDR network."))
    enabled = models.BooleanField(_("enabled"), default=True)
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True,
                                      help_text=_("After this time the rule no longer applies."))
    reason = models.TextField(_("reason"), blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    changed_by = models.ForeignKey(settings.AUTH_USER_MODEL, verbose_name=_("changed by"), null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")

    objects = AccessRuleQuerySet.as_manager()

    class Meta:
        verbose_name = _("access rule")
        verbose_name_plural = _("access rules")
        ordering = ["kind", "policy", "descriptor", "value"]

    def __str__(self) -> str:
        return f"{self.kind} {self.descriptor}={self.value} ({self.policy or '*'})"
