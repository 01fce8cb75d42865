"""Descriptors: the request attributes a limit's key is built from.

Built in: ``ip`` (see ``client_ip``; a request without a client address is keyed as
``"unknown"``, one bucket shared by all such requests), ``user`` (the authenticated user's pk; None for
anonymous requests, so limits keyed by it are skipped), ``method``, ``route`` (the
resolved URL name, ``namespace:name``; None when the URL has no name), ``header:<Name>``,
and the callables named in ``DESCRIPTORS`` (``request -> str | None``).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.http import HttpRequest
from django.urls import Resolver404, get_resolver
from django.utils.module_loading import import_string

from .conf import get_settings, on_change
from .policy import HEADER_PREFIX, Policy

__all__ = ["UNKNOWN_IP", "adescriptors_for", "client_address", "client_ip", "descriptor_names", "descriptors_for",
           "normalise_ip", "resolve_custom", "unknown_ip_count", "url_name"]

logger = logging.getLogger("django_gcra")

#: The ``ip`` of a request that carries no client address (``REMOTE_ADDR`` missing or blank,
#: an ASGI server on a unix socket): all such requests share this one bucket, never skipped.
UNKNOWN_IP = "unknown"
UNKNOWN_LOG_INTERVAL = 60.0  # seconds between log lines about requests without an address


class _Unknown:
    """Counts requests without a client address; logs at most once per interval."""

    def __init__(self) -> None:
        self.count, self.unlogged, self.logged_at = 0, 0, -UNKNOWN_LOG_INTERVAL
        self.lock = threading.Lock()

    def seen(self) -> None:
        now = time.monotonic()
        with self.lock:
            self.count += 1
            self.unlogged += 1
            if now - self.logged_at < UNKNOWN_LOG_INTERVAL:
                return
            self.logged_at, due, self.unlogged = now, self.unlogged, 0
        logger.warning("django_gcra: %d request(s) without a client address (REMOTE_ADDR missing or blank) "
                       "since the last report; their ip limits share the bucket %r", due, UNKNOWN_IP)


_unknown = _Unknown()


def unknown_ip_count() -> int:
    """Requests this process keyed as ``UNKNOWN_IP``."""
    return _unknown.count


@functools.cache
def resolve_custom(path: str) -> Callable[[Any], Any]:
    """Import a ``DESCRIPTORS`` callable; ``ImportError`` names the path."""
    try:
        func = import_string(path)
    except ImportError as exc:
        raise ImportError(f"could not import {path!r}: {exc}") from exc
    if not callable(func):
        raise ImportError(f"{path!r} is not callable")
    return func  # type: ignore[no-any-return]


def _parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("["):  # "[2001:db8::1]:443"
        text = text[1:text.find("]")] if "]" in text else text[1:]
    elif text.count(":") == 1:  # "192.0.2.1:443"
        text = text.split(":", 1)[0]
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone id
    except ValueError:
        return None


def normalise_ip(text: str, prefix: int | None = None) -> str | None:
    """IPv4 as is; IPv4-mapped IPv6 as its IPv4; other IPv6 as its /prefix network.

    A value that is not an address is returned stripped (it is still a key, so
    garbage cannot dodge a limit); an empty one gives None.
    """
    address = _parse_ip(text)
    if address is None:
        return text.strip() or None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        prefix = get_settings().ipv6_prefix if prefix is None else prefix
        return str(ipaddress.IPv6Network((address, prefix), strict=False))
    return str(address)


def client_ip(request: HttpRequest) -> str:
    """The client's address; ``UNKNOWN_IP`` when the request has none.

    With ``TRUSTED_PROXIES = n`` (n proxies, each appending the address it received
    from), the n-th ``X-Forwarded-For`` entry from the right is the one the outermost
    trusted proxy wrote. Entries further left are client-supplied and never used; with
    fewer than n entries the request did not pass every proxy, so ``REMOTE_ADDR`` is used.
    """
    meta = request.META
    hops = get_settings().trusted_proxies
    if hops:
        entries = [e for e in (x.strip() for x in str(meta.get("HTTP_X_FORWARDED_FOR", "")).split(",")) if e]
        if len(entries) >= hops:
            address = normalise_ip(entries[-hops])
            if address is not None:
                return address
    address = normalise_ip(str(meta.get("REMOTE_ADDR") or ""))
    if address is None:
        _unknown.seen()
        return UNKNOWN_IP
    return address


def client_address(request: HttpRequest) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The client's own address, chosen as ``client_ip`` chooses it (``TRUSTED_PROXIES``) but
    not grouped (an IPv4-mapped IPv6 address is its IPv4 one); None when the request has no
    address, or a value that is not one. What exempt and deny rules on ``ip`` match when
    the request is known (docs/howto/exempt-and-deny.md)."""
    meta = request.META
    hops = get_settings().trusted_proxies
    text = str(meta.get("REMOTE_ADDR") or "")
    if hops:
        entries = [e for e in (x.strip() for x in str(meta.get("HTTP_X_FORWARDED_FOR", "")).split(",")) if e]
        if len(entries) >= hops:
            text = entries[-hops]
    address = _parse_ip(text)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def url_name(request: HttpRequest) -> str | None:
    """The resolved URL name (with namespaces), resolving once per request if needed."""
    match = getattr(request, "resolver_match", None)
    if match is None:
        if not hasattr(request, "_gcra_match"):
            try:
                request._gcra_match = get_resolver(getattr(request, "urlconf", None)).resolve(request.path_info)
            except Resolver404:
                request._gcra_match = None
        match = request._gcra_match
    if match is None or not match.url_name:
        return None
    return str(match.view_name)


def _user_pk(user: Any) -> str | None:
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return str(user.pk)


def descriptor_names(policy: Policy) -> frozenset[str]:
    """The descriptors a decision on ``policy`` needs (``tier`` too when a rate is tiered)."""
    if "tier" in get_settings().descriptors and any(limit.tiered for limit in policy.limits):
        return policy.descriptors | {"tier"}
    return policy.descriptors


def _value(request: HttpRequest, name: str) -> Any:
    if name == "ip":
        return client_ip(request)
    if name == "method":
        return request.method
    if name == "route":
        return url_name(request)
    if name.startswith(HEADER_PREFIX):
        return request.headers.get(name[len(HEADER_PREFIX):])
    return resolve_custom(get_settings().descriptors[name])(request)


def _async_custom(name: str) -> Callable[[Any], Any] | None:
    path = get_settings().descriptors.get(name)
    func = resolve_custom(path) if path is not None else None
    return func if func is not None and iscoroutinefunction(func) else None


def descriptors_for(request: HttpRequest, names: Iterable[str]) -> dict[str, Any]:
    """The values of ``names`` for ``request`` (None where missing)."""
    return {name: _user_pk(getattr(request, "user", None)) if name == "user" else _value(request, name)
            for name in names}


async def adescriptors_for(request: HttpRequest, names: Iterable[str]) -> dict[str, Any]:
    """``descriptors_for`` in async code: the user is loaded with ``auser()`` and async
    custom callables are awaited (sync ones are called directly: they must not do I/O)."""
    values: dict[str, Any] = {}
    for name in names:
        custom = None if name == "user" else _async_custom(name)
        if name == "user":
            values[name] = _user_pk(await _auser(request))
        elif custom is not None:
            values[name] = await custom(request)
        else:
            values[name] = _value(request, name)
    return values


async def _auser(request: HttpRequest) -> Any:
    if hasattr(request, "auser"):
        return await request.auser()
    # Django < 5.0: request.user is lazy, so evaluate it in a thread
    return await sync_to_async(_loaded_user)(request)


def _loaded_user(request: HttpRequest) -> Any:
    user = getattr(request, "user", None)
    if user is not None:
        bool(getattr(user, "is_authenticated", False))  # evaluates the lazy object
    return user


on_change(resolve_custom.cache_clear)
