"""The override form: policy then limit as dependent choices, descriptor matches as
``name=value`` lines, every field validated against the policies of the plane (settings,
inline ``@ratelimit`` limits and DRF scopes: ``catalog.policies()``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from django import forms
from django.utils.translation import gettext_lazy as _

from . import catalog
from .models import LimitOverride
from .policy import Limit, Policy, log_problem
from .rates import Rate, parse_rate

__all__ = ["LimitOverrideForm", "configured", "match_lines", "parse_match", "rate_text"]


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
    if policy is not None:
        unknown = sorted(set(match) - set(policy.descriptors))
        if unknown:
            raise forms.ValidationError(
                _("Policy %(policy)s does not use descriptor(s) %(unknown)s; it uses %(known)s.")
                % {"policy": policy.name, "unknown": ", ".join(unknown),
                   "known": ", ".join(sorted(policy.descriptors))})
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

    def clean_rate(self) -> str:
        rate = str(self.cleaned_data.get("rate", "")).strip()
        if rate:
            try:
                parse_rate(rate)
            except ValueError as exc:
                raise forms.ValidationError(str(exc)) from None
        return rate

    def clean_burst(self) -> int | None:
        burst = cast("int | None", self.cleaned_data.get("burst"))
        if burst is not None and burst < 1:
            raise forms.ValidationError(_("The burst must be at least 1."))
        return burst

    def clean(self) -> dict[str, Any]:
        data = cast("dict[str, Any]", super().clean())
        policy = catalog.find(str(data.get("policy")))
        limit = data.get("limit")
        if policy is not None and limit is not None:
            names = [lim.name for lim in policy.limits] + [c.name for c in policy.concurrency]
            if limit not in names:
                self.add_error("limit", _("Policy %(policy)s has no limit %(limit)r; its limits: %(names)s.")
                               % {"policy": policy.name, "limit": limit, "names": ", ".join(names)})
        try:
            data["match"] = parse_match(str(self.data.get(self.add_prefix("match"), "") if self.is_bound else ""),
                                        policy)
        except forms.ValidationError as exc:
            self.add_error("match", exc)
        concurrent = next((c for c in policy.concurrency if c.name == limit), None) if policy else None
        if concurrent is not None and data.get("rate"):
            self.add_error("rate", _("Limit %(limit)s is a concurrency limit: it has no rate. Its max is the burst "
                                     "field.") % {"limit": limit})
        configured = next((lim for lim in policy.limits if lim.name == limit), None) if policy else None
        if data.get("quota") is not None and (configured is None or not configured.quota):
            self.add_error("quota", _("Limit %(limit)s is not a calendar quota: only a limit of algorithm 'quota' "
                                      "takes a quota.") % {"limit": limit})
        if configured is not None and configured.quota:
            for field in ("rate", "burst"):
                if data.get(field):
                    self.add_error(field, _("Limit %(limit)s is a calendar quota: it has no rate or burst. "
                                            "Change its quota instead.") % {"limit": limit})
        elif configured is not None and configured.sliding:
            if data.get("burst") is not None:
                self.add_error("burst", _("Limit %(limit)s is a %(algorithm)s limit: it takes no burst. Change its "
                                          "rate (N per period) instead.")
                               % {"limit": limit, "algorithm": configured.algorithm})
            if configured.algorithm == "sliding_log" and data.get("rate"):
                why = log_problem(parse_rate(data["rate"]))
                if why is not None:
                    self.add_error("rate", why)
        return data
