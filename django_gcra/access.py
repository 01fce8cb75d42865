"""Exemptions and deny lists on the decision path: ``check`` / ``acheck``, called by
``decide()`` / ``adecide()`` before any plan or store call while some rule may be in force
(the engine's ``OverrideCache.ruled``: one attribute test when there is none).

The rules of a decision on policy P: ``EXEMPT``/``DENY`` (every policy), P's own
``exempt``/``deny``, and the ``AccessRule`` rows of every policy and of P (kept in memory
by the engine's ``OverrideCache``, reloaded on its version stamp: no database query here). Deny rules
are checked first, then exempt rules. A match is answered at once, without the store:

- deny: ``allowed=False, blocked=True`` (the surfaces answer 403);
- exempt: ``allowed=True, exempt=True`` and no limit state (so no quota header).

Either is offered to the observers like any decision (the console counts ``blocked`` and
``exempt``, the audit records ``blocked``) and sent with the ``decision`` signal.

What a rule is matched against: the descriptors passed. When the request is known (every
surface passes it), a rule on a descriptor the call did not pass is matched against its
value for the request, ``ip`` rules also match the client's own address
(``identity.client_address``: not the IPv6 group of the ``ip`` descriptor), and the
callable rules run (``request -> bool``; an async one is awaited by ``adecide``). Without
a request, a rule on ``ip`` matches a descriptor value that is an address, or an IPv6
group (``2001:db8:1:2::/64``) that lies wholly inside a rule's network.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from asgiref.sync import async_to_sync, iscoroutinefunction
from django.http import HttpRequest

from .decision import Decision
from .identity import adescriptors_for, client_address, descriptors_for, resolve_custom
from .overrides import OverrideCache
from .plan import bad_cost, bad_descriptor, get_policy, missing_descriptor
from .policy import Policy
from .rules import DENY, EXEMPT, RuleSet, as_address
from .signals import decision as decision_signal
from .signals import notable_observers, observers

__all__ = ["acheck", "check", "rule_sets"]


def rule_sets(plane: OverrideCache, pol: Policy) -> list[RuleSet]:
    """Every source of rules for ``pol`` (the settings', its own, the rows' that ``plane``
    holds), reloading the rows first when their refresh is due (in the background)."""
    settings = plane.settings
    if time.monotonic() >= plane.next_check:
        plane.get()
    table = plane.access
    found = [settings.access, pol.access, table.get(""), table.get(pol.name)]
    return [rules for rules in found if rules]


def check(plane: OverrideCache, policy: str | Policy, descriptors: Mapping[str, Any], cost: int,
          request: HttpRequest | None) -> Decision | None:
    """The blocked or exempt decision when a rule matches; None otherwise (``decide`` goes on)."""
    pol, sets, names = _prepare(plane, policy, descriptors, cost)
    if not sets:
        return None
    values = _strings({name: descriptors[name] for name in pol.descriptors | names if name in descriptors})
    missing = _missing(names, descriptors, request)
    if missing:
        values.update(_strings(descriptors_for(request, missing)))
    addresses = _addresses(sets, values, request)
    now = time.time()
    for kind in (DENY, EXEMPT):
        found = _match(sets, kind, values, addresses, now)
        if found is None and request is not None:
            for path in _callables(sets, kind):
                func = resolve_custom(path)
                if async_to_sync(func)(request) if iscoroutinefunction(func) else func(request):
                    found = path
                    break
        if found is not None:
            return _decided(pol, kind, values, addresses, found, cost, request)
    return None


async def acheck(plane: OverrideCache, policy: str | Policy, descriptors: Mapping[str, Any], cost: int,
                 request: HttpRequest | None) -> Decision | None:
    """``check`` for ``adecide``: descriptors of the request are read with
    ``adescriptors_for`` and async callables are awaited (sync ones are called directly:
    like a descriptor callable, they must not do I/O)."""
    pol, sets, names = _prepare(plane, policy, descriptors, cost)
    if not sets:
        return None
    values = _strings({name: descriptors[name] for name in pol.descriptors | names if name in descriptors})
    missing = _missing(names, descriptors, request)
    if missing:
        values.update(_strings(await adescriptors_for(request, missing)))
    addresses = _addresses(sets, values, request)
    now = time.time()
    for kind in (DENY, EXEMPT):
        found = _match(sets, kind, values, addresses, now)
        if found is None and request is not None:
            for path in _callables(sets, kind):
                func = resolve_custom(path)
                if await func(request) if iscoroutinefunction(func) else func(request):
                    found = path
                    break
        if found is not None:
            return _decided(pol, kind, values, addresses, found, cost, request)
    return None


def _prepare(plane: OverrideCache, policy: str | Policy, descriptors: Mapping[str, Any],
             cost: int) -> tuple[Policy, list[RuleSet], frozenset[str]]:
    """The policy, its rule sets and the descriptors they match on, after the checks
    ``plan`` makes of the call (a call in error raises whether or not a rule matches)."""
    pol = plane.settings.policies.get(policy) if type(policy) is str else None
    if pol is None:
        pol = get_policy(policy)
    if type(cost) is not int or cost < 0:
        raise bad_cost(cost)
    for name in pol.descriptors:
        if name not in descriptors:
            raise missing_descriptor(pol, name)
    sets = rule_sets(plane, pol)
    return pol, sets, frozenset().union(*(rules.names for rules in sets))


def _missing(names: frozenset[str], descriptors: Mapping[str, Any], request: HttpRequest | None) -> list[str]:
    """The descriptors the rules match on that the call did not pass: read from the request
    (``ip`` is matched on the request's own address instead)."""
    if request is None:
        return []
    return [name for name in names if name not in descriptors and name != "ip"]


def _strings(found: Mapping[str, Any]) -> dict[str, str]:
    """Descriptor values as strings (an int as its digits), the missing ones left out;
    ``TypeError`` for any other type, as ``plan`` raises."""
    values = {}
    for name, value in found.items():
        if value is None:
            continue
        if type(value) is not str and type(value) is not int:
            raise bad_descriptor(name, value)
        values[name] = str(value)
    return values


def _addresses(sets: list[RuleSet], values: Mapping[str, str],
               request: HttpRequest | None) -> list[Any]:
    """What ``ip`` rules match: the ``ip`` descriptor's value and the request's own address."""
    if not any(rules.exempt.networks or rules.deny.networks for rules in sets):
        return []
    found: list[Any] = []
    if "ip" in values:
        address = as_address(values["ip"])
        if address is not None:
            found.append(address)
    if request is not None:
        own = client_address(request)
        if own is not None:
            found.append(own)
    return found


def _match(sets: list[RuleSet], kind: str, values: Mapping[str, str], addresses: list[Any],
           now: float) -> str | None:
    for rules in sets:
        found = rules.of(kind).match(values, addresses, now)
        if found is not None:
            return found
    return None


def _callables(sets: list[RuleSet], kind: str) -> list[str]:
    return [path for rules in sets for path in rules.of(kind).callables]


def _decided(pol: Policy, kind: str, values: dict[str, str], addresses: list[Any], rule: str, cost: int,
             request: HttpRequest | None) -> Decision:
    """The decision of a matched rule, offered to the observers and sent, as ``outcomes.finish``
    offers and sends a decision that is not a plain admission."""
    if "ip" not in values and rule.startswith("ip=") and addresses:  # matched on the client's own address
        values["ip"] = str(addresses[-1])
    name = pol.name
    if kind == DENY:
        decision = Decision(allowed=False, retry_after=0.0, remaining=0, limit="", policy=name, cost=cost,
                            blocked=True, descriptors=MappingProxyType(values))
    else:
        decision = Decision(allowed=True, retry_after=0.0, remaining=0, limit="", policy=name, cost=cost,
                            exempt=True, descriptors=MappingProxyType(values))
    for observer in observers:
        observer(name, decision, request)
    for observer in notable_observers:
        observer(name, decision, request)
    if decision_signal.receivers:
        decision_signal.send(sender=name, decision=decision, request=request)
    return decision

