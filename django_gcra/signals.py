"""Signals. Receivers run on the request path: keep them cheap and never raise."""

from collections.abc import Callable
from typing import Any

from django.dispatch import Signal

#: Sent after every decision. ``sender`` is the policy name; arguments:
#: ``decision`` (a ``Decision``) and ``request`` (the ``HttpRequest``, or None when
#: ``decide()`` was called without one). Not sent when nothing is connected.
decision = Signal()

#: The app's own observers of every decision (the console's counts, a region's demand),
#: called as ``observer(sender, decision, request)`` (the signal's arguments, by position)
#: just before it is sent. They are set in ``AppConfig.ready`` and called directly: the
#: signal's per-call receiver bookkeeping would cost more than all of them on the hot path.
observers: list[Callable[..., Any]] = []

#: The app's own observers of the decisions that are not a plain admission (denied, shadow
#: would-deny, fallback, waited: ``decision.outcome_of`` is not "allowed"), called just
#: after ``observers``: the audit trail and the metrics. A plain admission, most
#: decisions, is not offered to them at all.
notable_observers: list[Callable[..., Any]] = []
