"""Signals. Receivers run on the request path: keep them cheap and never raise."""

from collections.abc import Callable
from typing import Any

from django.dispatch import Signal

#: Sent after every decision. ``sender`` is the policy name; arguments:
#: ``decision`` (a ``Decision``) and ``request`` (the ``HttpRequest``, or None when
#: ``decide()`` was called without one). Not sent when nothing is connected.
decision = Signal()

#: The app's own observers of every decision (the audit trail and metrics), called with
#: the signal's arguments just before it is sent. They are set in ``AppConfig.ready``
#: and called directly: the signal's per-call receiver bookkeeping would cost more
#: than both of them on the hot path.
observers: list[Callable[..., Any]] = []
