"""The override and access rule forms. The override form: policy then limit as dependent choices, descriptor matches as
``name=value`` lines, every field validated against the policies of the plane (settings,
inline ``@ratelimit`` limits and DRF scopes: ``catalog.policies()``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from django import forms
from django.utils.translation import gettext_lazy as _

from . import catalog
from .conf import get_settings
from .models import AccessRule, LimitOverride
from .override_rules import match_problem
from .policy import Limit, Policy, is_known_descriptor
from .rates import Rate
from .rules import parse_network

__all__ = ["AccessRuleForm", "LimitOverrideForm", "configured", "match_lines", "parse_match", "rate_text"]


def rate_text(rate: Rate) -> str:
    """A rate as an operator writes it: ``60/m``, ``10/30s``, ``1000/d``."""
    for unit, seconds in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rate.period % seconds == 0:
            times = rate.period // seconds
            return f"{rate.count}/{'' if times == 1 else times}{unit}"
    return str(rate)  # pragma: no cover - every period is a whole number of seconds


def configured(limit: Limit) -> dict[str, Any]:
    """A limit's configured values, as the form shows them beside the override."""
    rates = {("" if tier is None else tier): rate_text(rate) for tier, rate in limit.rates.items()}
    counts = sorted({rate.count for rate in limit.rates.values()})
    return {"rates": rates, "burst": limit.burst, "burst_default": counts[0] if len(counts) == 1 else None,
            "key": list(limit.key), "mode": limit.mode}


def limits_table(policies: Mapping[str, Policy]) -> dict[str, dict[str, Any]]:
    """``{policy: {"mode": ..., "limits": {limit: configured(limit)}}}`` for the form's script."""
    return {name: {"mode": p.mode, "descriptors": sorted(p.descriptors), "origin": catalog.origin(name),
                   "limits": {lim.name: {**configured(lim), "mode": p.mode_of(lim)} for lim in p.limits}}
            for name, p in sorted(policies.items())}


def match_lines(match: Mapping[str, Any] | None) -> str:
    """A stored match as the form's ``name=value`` lines."""
    return "\n".join(f"{k}={v}" for k, v in sorted((match or {}).items()))


def parse_match(text: str, policy: Policy | None) -> dict[str, str]:
    """``name=value`` lines (or a JSON object) -> a match; ``ValidationError`` naming each bad line."""
    text = (text or "").strip()
    if text.startswith("{"):
        try:
            loaded = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(_("Not a JSON object: %(error)s. Write one name=value a line instead.")
                                        % {"error": exc}) from None
        if not isinstance(loaded, dict):
            raise forms.ValidationError(_("Write one name=value a line, e.g. tenant=acme."))
        bad = sorted(k for k, v in loaded.items() if isinstance(v, bool) or not isinstance(v, (str, int)))
        if bad:
            raise forms.ValidationError(_("Descriptor values must be strings: %(names)s.") % {"names": ", ".join(bad)})
        pairs = [(str(k), str(v)) for k, v in loaded.items()]
    else:
        pairs = []
        errors = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            name, sep, value = line.partition("=")
            name, value = name.strip(), value.strip()
            if not sep:
                errors.append(_("Line %(n)d (%(line)r) has no '=': write name=value, e.g. tenant=acme.")
                              % {"n": number, "line": line.strip()})
            elif not name:
                errors.append(_("Line %(n)d (%(line)r) names no descriptor before '='.")
                              % {"n": number, "line": line.strip()})
            elif not value:
                errors.append(_("Line %(n)d: descriptor %(name)s has no value.") % {"n": number, "name": name})
            elif name in dict(pairs):
                errors.append(_("Line %(n)d: descriptor %(name)s is given twice.") % {"n": number, "name": name})
            else:
                pairs.append((name, value))
        if errors:
            raise forms.ValidationError(errors)
    match = dict(pairs)
    why = match_problem(match, policy) if policy is not None else None
    if why is not None:
        raise forms.ValidationError(why)
    return match


ORIGIN_LABELS = {catalog.INLINE: _("@ratelimit"), catalog.DRF: _("DRF scope")}


def policy_label(name: str) -> str:
    """A policy's choice label: its name, and where it is defined unless in ``POLICIES``."""
    where = ORIGIN_LABELS.get(catalog.origin(name))
    return f"{name} ({where})" if where else name


class LimitOverrideForm(forms.ModelForm):
    policy = forms.ChoiceField(label=_("policy"))
    limit = forms.ChoiceField(label=_("limit"), help_text=_("The limits of the policy chosen above."))
    match = forms.CharField(
        label=_("descriptor match"), required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 40, "placeholder": "tenant=acme"}),
        help_text=_("One name=value a line, e.g. tenant=acme: the requests this override applies to. "
                    "Empty: every request."))

    class Meta:
        model = LimitOverride
        fields = ["policy", "limit", "match", "rate", "burst", "quota", "mode", "enabled", "expires_at", "reason"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        catalog.discover()  # the URLconf's inline limits and DRF's scopes (a failure: only settings' are listed)
        policies = catalog.policies()
        self.fields["policy"].choices = [(name, policy_label(name)) for name in sorted(policies)]
        # Grouped by policy (an <optgroup> each): without script the groups still say which is whose.
        self.fields["limit"].choices = [
            (name, [(lim.name, f"{lim.name} (key: {'+'.join(lim.key) or 'none'})") for lim in policies[name].limits]
             + [(c.name, f"{c.name} (concurrency, max {c.max}: the burst field; key: {'+'.join(c.key) or 'none'})")
                for c in policies[name].concurrency])
            for name in sorted(policies)]
        if self.instance.pk and not self.is_bound:
            self.initial["match"] = match_lines(self.instance.match)
        elif isinstance(self.initial.get("match"), dict):
            self.initial["match"] = match_lines(self.initial["match"])
        self.limits_table = limits_table(policies)

    def clean_burst(self) -> int | None:
        burst = cast("int | None", self.cleaned_data.get("burst"))
        if burst is not None and burst < 1:
            raise forms.ValidationError(_("The burst must be at least 1."))
        return burst

    def clean(self) -> dict[str, Any]:
        """The match's lines; every other rule (a limit of the policy, the ranges of the
        settings) is the model's: ``LimitOverride.full_clean`` applies the limiter's own
        (``override_rules.override_problem``) after this."""
        data = cast("dict[str, Any]", super().clean())
        policy = catalog.find(str(data.get("policy")))
        try:
            data["match"] = parse_match(str(self.data.get(self.add_prefix("match"), "") if self.is_bound else ""),
                                        policy)
        except forms.ValidationError as exc:
            self.add_error("match", exc)
        return data


class AccessRuleForm(forms.ModelForm):
    """An exempt or deny rule: a policy of the plane (or every policy), a descriptor the
    settings know, and for ``ip`` an address or CIDR network."""

    policy = forms.ChoiceField(label=_("policy"), required=False, help_text=_("Blank: every policy."))

    class Meta:
        model = AccessRule
        fields = ["kind", "policy", "descriptor", "value", "enabled", "expires_at", "reason"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        catalog.discover()
        self.fields["policy"].choices = [("", _("every policy"))] + [
            (name, policy_label(name)) for name in sorted(catalog.policies())]

    def clean_descriptor(self) -> str:
        name = str(self.cleaned_data.get("descriptor", "")).strip()
        custom = get_settings().descriptors
        if not is_known_descriptor(name, custom):
            known = ", ".join(["ip", "user", "method", "route", "header:<Name>", *sorted(custom)])
            raise forms.ValidationError(_("Unknown descriptor %(name)r; use one of %(known)s.")
                                        % {"name": name, "known": known})
        return name

    def clean(self) -> dict[str, Any]:
        data = cast("dict[str, Any]", super().clean())
        value = str(data.get("value") or "").strip()
        if data.get("descriptor") == "ip" and value:
            try:
                parse_network(value)
            except ValueError:
                self.add_error("value", _("%(value)r is not an IP address or CIDR network (e.g. 203.0.113.0/24, "
                                          "2001:db8::/32, ::1).") % {"value": value})
        data["value"] = value
        return data
