"""Exemption and deny rules (``EXEMPT``, ``DENY``, a policy's ``exempt``/``deny``, ``AccessRule``
rows), parsed once and compiled for the request path.

A rule is a dict of one descriptor name to a list of values (for ``ip``: addresses or CIDR
networks, IPv4 or IPv6), or a dotted path to a callable ``request -> bool``. ``Matcher``
holds one kind's rules (every exempt rule of one source, or every deny rule):

- exact values per descriptor in a dict (one lookup per descriptor);
- ``ip`` networks bucketed by prefix length, each bucket a dict of network numbers: a
  lookup masks the address once per prefix length in use, so ten thousand networks cost
  no more than a few (a linear scan of ``ip_network`` objects would cost one test each);
- the callables' dotted paths, imported on first use (``manage.py check`` imports them first).

Each entry carries its expiry (Unix time; ``inf`` for the settings' rules), so an expired
``AccessRule`` stops applying without a save.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .codes import Codes, Problem

__all__ = ["DENY", "EXEMPT", "KINDS", "Matcher", "RuleSet", "as_address", "parse_network",
           "parse_rules"]

EXEMPT, DENY = "exempt", "deny"
KINDS = (EXEMPT, DENY)
NEVER = math.inf  # the expiry of a rule that never expires
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")  # IPv4-mapped IPv6 addresses


def parse_network(value: Any) -> Network:
    """An ``ip`` rule's value as a network (an address is its /32 or /128); an IPv4-mapped
    IPv6 address or network is its IPv4 one. ``ValueError`` when it is neither."""
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    network = ipaddress.ip_network(value.strip(), strict=False)
    if isinstance(network, ipaddress.IPv6Network) and network.prefixlen >= 96 and network.subnet_of(_MAPPED):
        mapped = network.network_address.ipv4_mapped
        assert mapped is not None
        return ipaddress.IPv4Network((mapped, network.prefixlen - 96))
    return network


def as_address(value: str) -> Address | Network | None:
    """A descriptor's ``ip`` value as an address (IPv4-mapped: its IPv4), or as a network
    (the IPv6 group ``identity`` makes, such as ``2001:db8::/64``); None when it is neither."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        if "/" not in value:
            return None
        try:
            return parse_network(value)
        except ValueError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass
class Matcher:
    """One kind's rules of one source, compiled. ``names``: the descriptors they match on."""

    values: dict[str, dict[str, float]] = field(default_factory=dict)  # descriptor -> value -> expiry
    # IP version -> [(prefix length, mask, {network number: expiry})], one entry per prefix length in use
    networks: dict[int, list[tuple[int, int, dict[int, float]]]] = field(default_factory=dict)
    callables: tuple[str, ...] = ()
    expiring: bool = False  # some entry expires: matching needs the time

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.values) | ({"ip"} if self.networks else frozenset())

    def __bool__(self) -> bool:
        return bool(self.values or self.networks or self.callables)

    def add(self, descriptor: str, value: str, expires: float = NEVER) -> None:
        """Add one rule value (``ValueError`` for an ``ip`` value that is no address or network)."""
        self.expiring = self.expiring or expires != NEVER
        if descriptor != "ip":
            known = self.values.setdefault(descriptor, {})
            known[value] = max(expires, known.get(value, -NEVER))
            return
        network = parse_network(value)
        buckets = self.networks.setdefault(network.version, [])
        bucket = next((b for b in buckets if b[0] == network.prefixlen), None)
        if bucket is None:
            bucket = (network.prefixlen, int(network.netmask), {})
            buckets.append(bucket)
            buckets.sort(key=lambda b: b[0])
        number = int(network.network_address)
        bucket[2][number] = max(expires, bucket[2].get(number, -NEVER))

    def match(self, values: Mapping[str, str], addresses: Iterable[Address | Network], now: float) -> str | None:
        """The rule matching these descriptor values or client addresses (``descriptor=value``),
        or None. A network (an IPv6 group) matches only a rule network that holds all of it."""
        for name, table in self.values.items():
            value = values.get(name)
            if value is not None:
                expires = table.get(value)
                if expires is not None and expires > now:
                    return f"{name}={value}"
        if self.networks:
            for address in addresses:
                found = self._network_of(address, now)
                if found is not None:
                    return found
        return None

    def _network_of(self, address: Address | Network, now: float) -> str | None:
        if isinstance(address, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
            number, longest = int(address.network_address), address.prefixlen
        else:
            number, longest = int(address), address.max_prefixlen
        for prefixlen, mask, table in self.networks.get(address.version, ()):
            if prefixlen > longest:
                break  # a rule narrower than the group: it does not hold every address of it
            expires = table.get(number & mask)
            if expires is not None and expires > now:
                kind = ipaddress.IPv4Network if address.version == 4 else ipaddress.IPv6Network
                return f"ip={kind((number & mask, prefixlen))}"
        return None


@dataclass
class RuleSet:
    """A source's rules of both kinds (the settings' ``EXEMPT``/``DENY``, one policy's, or
    the ``AccessRule`` rows of one policy or of every policy)."""

    exempt: Matcher = field(default_factory=Matcher)
    deny: Matcher = field(default_factory=Matcher)

    def __bool__(self) -> bool:
        return bool(self.exempt or self.deny)

    def of(self, kind: str) -> Matcher:
        return self.deny if kind == DENY else self.exempt

    @property
    def names(self) -> frozenset[str]:
        return self.exempt.names | self.deny.names


def parse_rules(where: str, raw: Any, kind: str, known: Any, problems: list[Problem], into: RuleSet) -> None:
    """Parse one list of rules (``EXEMPT``, ``DENY``, a policy's ``exempt``/``deny``) into
    ``into``, appending a problem (E120-E124) for each bad rule. ``known(name)`` tells a
    known descriptor."""
    if raw is None:
        return
    if not isinstance(raw, (list, tuple)):
        problems.append(Problem(Codes.BAD_ACCESS_RULES, f"{where} must be a list of rules.",
                                'e.g. [{"ip": ["10.0.0.0/8"]}, {"tenant": ["internal"]}, "myapp.limits.is_probe"]'))
        return
    matcher = into.of(kind)
    callables = list(matcher.callables)
    for index, rule in enumerate(raw):
        label = f"{where}[{index}]"
        if isinstance(rule, str):
            if not rule or "." not in rule:
                problems.append(Problem(Codes.BAD_ACCESS_RULE, f"{label} is {rule!r}, not a dotted path.",
                                        "Give a dotted path to a callable request -> bool."))
            else:
                callables.append(rule)
            continue
        if not isinstance(rule, Mapping) or len(rule) != 1:
            problems.append(Problem(Codes.BAD_ACCESS_RULE, f"{label} is {rule!r}; a rule is a dict of ONE descriptor "
                                    "name to a list of values, or a dotted path to a callable.",
                                    'Write one dict per descriptor: [{"ip": [...]}, {"tenant": [...]}].'))
            continue
        ((name, values),) = rule.items()
        if not isinstance(name, str) or not known(name):
            problems.append(Problem(Codes.ACCESS_UNKNOWN_DESCRIPTOR, f"{label} names unknown descriptor {name!r}.",
                                    "Use ip, user, method, route, header:<Name>, or a name from "
                                    "DJANGO_GCRA['DESCRIPTORS']."))
            continue
        if not isinstance(values, (list, tuple)) or not all(isinstance(v, (str, int)) and not isinstance(v, bool)
                                                            for v in values):
            problems.append(Problem(Codes.BAD_ACCESS_VALUES, f"{label}[{name!r}] is {values!r}; give a list of "
                                    "values (strings).", f'e.g. {{"{name}": ["value"]}}'))
            continue
        for value in values:
            try:
                matcher.add(name, str(value))
            except ValueError:
                problems.append(Problem(Codes.BAD_ACCESS_NETWORK, f"{label}['ip'] has {value!r}, which is not an IP "
                                        "address or CIDR network.", "e.g. 203.0.113.0/24, 2001:db8::/32 or ::1."))
    matcher.callables = tuple(callables)
