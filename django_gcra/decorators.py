"""``@ratelimit``: limit one view by a configured policy or an inline limit.

    @ratelimit(policy="login", methods=["POST"])
    @ratelimit(key="ip", rate="5/m", burst=5, cost=lambda request: 2, block=False)
    @ratelimit(key="user", rate="5/d", algorithm="sliding_log")   # at most 5 in any 24 h
    @ratelimit(key="user", rate="2/s", max_wait=1.5)   # wait up to 1.5 s for a slot, then 429

Works on sync and async views (async ones use ``adecide``, which never blocks the
event loop) and on class-based views through ``method_decorator``. ``request.ratelimit``
always holds a Decision (the most restrictive one when decorators are stacked; an
allowed one with ``cost=0`` on a method the decorator skips); with ``block=False`` a
denied request still reaches the view. An inline limit is a one-limit policy named after
the view and its rate (``view.<module>.<qualname>.<rate>``, e.g.
``view.shop.views.checkout.10-per-1s``, unless ``name=`` is given), so two views, or two
decorators stacked on one view, never share a counter.

``settle=fn`` (metered costs): ``fn(request, response) -> int`` is the request's actual
cost, charged once the view has answered (after the last chunk of a streamed body) by
``decision.settle``; ``count_when=fn`` charges the cost only when ``fn(request, response)``
is true (e.g. failed logins: every attempt is reserved first, so concurrent attempts can
never exceed the limit, and a success is refunded). A settle that fails never fails the
response (logged and counted).

``max_wait`` (seconds, shaping): a request that would be refused but has a slot within
``max_wait`` waits for it (the worker, or for an async view the coroutine, sleeps) and then
runs the view; beyond it the request is refused as without it. A bad ``max_wait`` raises
ImproperlyConfigured (E100; E101 when longer than the inline limit's period times its burst)
at decoration; with ``policy=`` it is checked against that policy by ``manage.py check``.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

from .catalog import inline_policy, register_inline
from .codes import Problem
from .conf import get_settings
from .plan import get_policy
from .policy import Policy
from .rates import parse_rate
from .shaping import max_wait_problems
from .surface import Metered, adecide_request, arespond, cost_of, decide_request, not_limited, respond
from .validation import is_int, max_wait_problem

__all__ = ["inline_policy", "ratelimit", "waiting_view_problems", "waiting_views"]

#: ``@ratelimit(..., max_wait=...)`` decorations in this process, for ``manage.py check``:
#: (policy name, max_wait) -> (where, the inline Policy or None: a configured policy, known
#: only once settings are read).
waiting_views: dict[tuple[str, float], tuple[str, Policy | None]] = {}


def waiting_view_problems() -> list[Problem]:
    """E101 / W100 for the ``max_wait`` of decorated views (an inline limit's E100/E101 are
    raised at decoration already)."""
    policies = get_settings().policies
    found = []
    for (name, max_wait), (where, inline) in sorted(waiting_views.items(), key=lambda item: item[0]):
        policy = inline or policies.get(name)
        if policy is not None:
            found += max_wait_problems(policy, max_wait, where)
    return found


def _label(rate: str, burst: int | None, methods: frozenset[str] | None, algorithm: str = "gcra") -> str:
    """What tells stacked inline limits apart: the rate (and burst, a sliding algorithm and
    methods when given), e.g. ``10-per-1s``; the last part of the policy's name."""
    try:
        parsed = parse_rate(rate)
        label = f"{parsed.count}-per-{parsed.period}s"
    except ValueError:
        label = re.sub(r"[^A-Za-z0-9_.-]", "_", str(rate))[:20]
    if burst is not None:
        label += f"-b{burst}"
    if algorithm != "gcra":
        label += "-" + algorithm
    if methods:
        label += "-" + "-".join(sorted(methods))
    return label[:64]


def view_policy_name(view: Callable[..., Any], label: str = "") -> str:
    """``view.<module>.<qualname>[.<label>]``, made a valid policy name (long ones end in a hash).

    Under ``method_decorator`` the view is a partial of a bound method, whose qualname is
    the defining class's (``View.dispatch`` for every CBV): the instance's class is used.
    """
    owner = getattr(getattr(view, "func", None), "__self__", None)
    if isinstance(view, functools.partial) and owner is not None:
        cls = type(owner)
        raw = f"view.{cls.__module__}.{cls.__qualname__}.{getattr(view, '__name__', '')}"
    else:
        raw = f"view.{getattr(view, '__module__', '')}.{getattr(view, '__qualname__', repr(view))}"
    if label:
        raw += f".{label}"
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", raw)
    if len(name) > 64:
        name = name[:55] + "-" + hashlib.sha256(raw.encode()).hexdigest()[:8]
    return name


def ratelimit(policy: str | None = None, *, key: str | Iterable[str] | None = None, rate: str | None = None,
              burst: int | None = None, cost: int | Callable[[Any], int] = 1, methods: Iterable[str] | None = None,
              block: bool = True, name: str | None = None, mode: str = "enforce",
              on_failure: str = "open", algorithm: str = "gcra",
              max_wait: float = 0.0, settle: Callable[[HttpRequest, Any], int] | None = None,
              count_when: Callable[[HttpRequest, Any], bool] | None = None,
              ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Limit a view; see the module docstring. Bad arguments raise ImproperlyConfigured now."""
    if settle is not None and count_when is not None:
        raise ImproperlyConfigured("@ratelimit takes settle= or count_when=, not both (count_when is the short "
                                   "form of a settle that returns the cost or 0).")
    for label_, fn in (("settle", settle), ("count_when", count_when)):
        if fn is not None and not callable(fn):
            raise ImproperlyConfigured(f"@ratelimit {label_}= must be a callable of (request, response), "
                                       f"not {fn!r}")
    metered = Metered(settle, count_when) if settle is not None or count_when is not None else None
    if (policy is None) == (rate is None):
        raise ImproperlyConfigured("@ratelimit needs either policy='name' or an inline key=, rate= (and burst=).")
    if policy is not None and (key is not None or burst is not None or name is not None or algorithm != "gcra"):
        raise ImproperlyConfigured("@ratelimit(policy=...) takes its keys, burst and algorithm from the policy; "
                                   "key=, burst=, algorithm= and name= are for inline limits.")
    if not callable(cost) and not is_int(cost, 0):
        raise ImproperlyConfigured(f"@ratelimit cost must be an int >= 0 or a callable, not {cost!r}")
    keys = (key,) if isinstance(key, str) else tuple(key or ("ip",))
    if isinstance(methods, str):
        methods = [methods]
    allowed_methods = frozenset(m.upper() for m in methods) if methods is not None else None
    label = "" if rate is None else _label(rate, burst, allowed_methods, algorithm)
    if max_wait_problem(max_wait):
        raise ImproperlyConfigured(f"@ratelimit max_wait {max_wait_problem(max_wait)} "
                                   f"(django_gcra.E100).")
    built = None
    if rate is not None:
        built = inline_policy(name or "inline", keys, rate, burst, mode, on_failure, algorithm)  # validate now
        for problem in max_wait_problems(built, max_wait, f"@ratelimit(key={list(keys)!r}, rate={rate!r})"):
            if problem.is_error:
                raise ImproperlyConfigured(f"{problem.msg} {problem.hint} ({problem.id})")

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        policy_name = policy or name or view_policy_name(view, label)
        # Under method_decorator Django first decorates a placeholder of its own (and then each
        # call's bound method, which registers under the class's name): skip the placeholder.
        if policy is None and rate is not None and getattr(view, "__module__", "") != "django.utils.decorators":
            register_inline(policy_name, keys, rate, burst, mode, on_failure, algorithm)  # the plane lists it
        if max_wait:
            named = f"policy={policy!r}" if policy else f"rate={rate!r}"
            where = f"@ratelimit({named}) on {view_policy_name(view)[len('view.'):]}"
            waiting_views[(policy_name, max_wait)] = (where, built)

        def resolve() -> Policy:
            if policy is not None:
                return get_policy(policy)
            return inline_policy(policy_name, keys, rate, burst, mode, on_failure,
                                 algorithm)

        def skipped(request: HttpRequest) -> bool:
            if allowed_methods is None or request.method in allowed_methods:
                return False
            not_limited(request, policy_name)
            return True

        if iscoroutinefunction(view):
            @functools.wraps(view)
            async def async_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                if skipped(request):
                    return await view(request, *args, **kwargs)
                decision = await adecide_request(request, resolve(), cost_of(cost, request), max_wait)
                return await arespond(request, decision, block, lambda: view(request, *args, **kwargs), metered)

            async_wrapper.ratelimit_policy = policy  # type: ignore[attr-defined]  # for check E026
            return async_wrapper

        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            if skipped(request):
                return view(request, *args, **kwargs)
            decision = decide_request(request, resolve(), cost_of(cost, request), max_wait)
            return respond(request, decision, block, lambda: view(request, *args, **kwargs), metered)

        wrapper.ratelimit_policy = policy  # type: ignore[attr-defined]  # for check E026
        return wrapper

    return decorator
