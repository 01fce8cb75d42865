"""Signals. Receivers run on the request path: keep them cheap and never raise."""

from django.dispatch import Signal

#: Sent after every decision. ``sender`` is the policy name; arguments:
#: ``decision`` (a ``Decision``) and ``request`` (the ``HttpRequest``, or None when
#: ``decide()`` was called without one). Metrics and the audit trail listen to it.
decision = Signal()
