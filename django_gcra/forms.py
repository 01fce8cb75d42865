"""The override form: every field validated against the configured policies."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.utils.translation import gettext_lazy as _

from .conf import get_settings
from .models import LimitOverride
from .policy import log_problem
from .rates import parse_rate


class LimitOverrideForm(forms.ModelForm):
    policy = forms.ChoiceField(label=_("policy"))

    class Meta:
        model = LimitOverride
        fields = ["policy", "limit", "match", "rate", "burst", "mode", "enabled", "expires_at", "reason"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        policies = get_settings().policies
        self.fields["policy"].choices = [(name, name) for name in sorted(policies)]
        self.fields["limit"].help_text = "; ".join(
            f"{p.name}: " + ", ".join(lim.name + " (key: " + "+".join(lim.key) + ")" for lim in p.limits)
            for p in sorted(policies.values(), key=lambda p: p.name))

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
        policy = get_settings().policies.get(str(data.get("policy")))
        if policy is None:
            return data
        limit = data.get("limit")
        names = [lim.name for lim in policy.limits]
        if limit is not None and limit not in names:
            self.add_error("limit", _("Policy %(policy)s has no limit %(limit)r; its limits: %(names)s.")
                           % {"policy": policy.name, "limit": limit, "names": ", ".join(names)})
        configured = next((lim for lim in policy.limits if lim.name == limit), None)
        if configured is not None and configured.sliding:
            if data.get("burst") is not None:
                self.add_error("burst", _("Limit %(limit)s is a %(algorithm)s limit: it takes no burst. Change its "
                                          "rate (N per period) instead.")
                               % {"limit": limit, "algorithm": configured.algorithm})
            if configured.algorithm == "sliding_log" and data.get("rate"):
                why = log_problem(parse_rate(data["rate"]))
                if why is not None:
                    self.add_error("rate", why)
        match = data.get("match")
        if match is None:
            match = data["match"] = {}
        if not isinstance(match, dict):
            self.add_error("match", _('Give a JSON object of descriptor values, e.g. {"tenant": "acme"}.'))
            return data
        unknown = sorted(set(match) - set(policy.descriptors))
        if unknown:
            self.add_error("match", _("Policy %(policy)s does not use descriptor(s) %(unknown)s; it uses %(known)s.")
                           % {"policy": policy.name, "unknown": ", ".join(unknown),
                              "known": ", ".join(sorted(policy.descriptors))})
        bad = sorted(k for k, v in match.items() if isinstance(v, bool) or not isinstance(v, (str, int)))
        if bad:
            self.add_error("match", _("Descriptor values must be strings: %(names)s.") % {"names": ", ".join(bad)})
        elif not unknown:
            data["match"] = {k: str(v) for k, v in match.items()}
        return data
