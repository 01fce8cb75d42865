"""One django_gcra Policy per django-ratelimit bucket (group, rate, key, methods).

django-ratelimit keys its counter by group, rate, key value and methods; here group, rate,
key form and methods name the policy and the key value is its one descriptor, so every
decorator, group and rate has its own bucket and two values of one key never share one.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from typing import Any

from django_gcra.policy import Policy, build_policy

__all__ = ["VALUE", "bucket_policy", "policy_name"]

VALUE = "ratelimit_value"  # the descriptor that carries the key's value
_CUSTOM = {VALUE: None}  # parse_policy only checks that the descriptor name is declared
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


def key_id(key: Any) -> str:
    """A stable name of a key form: the string itself, or a callable's dotted name (the
    same in every process, unlike its id)."""
    if isinstance(key, str):
        return key
    return f"{getattr(key, '__module__', '')}.{getattr(key, '__qualname__', type(key).__qualname__)}"


def methods_id(method: Any) -> str:
    """The methods part of django-ratelimit's cache key: '' for ALL, else sorted, upper case."""
    if method is None or method == (None,):
        return ""
    if isinstance(method, (list, tuple)):
        return ",".join(sorted(m.upper() for m in method))
    return str(method).upper()


@functools.lru_cache(maxsize=4096)
def policy_name(group: str, limit: int, period: int, key: str, methods: str) -> str:
    """A valid policy name (``^[A-Za-z0-9_.-]{1,64}$``): a readable slug of the group and
    64 bits of SHA-256 over every part, so distinct buckets get distinct names (up to a
    64-bit hash collision) and the same bucket the same name in every process."""
    raw = "\x1f".join((group, f"{limit}/{period}s", key, methods))
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    slug = _UNSAFE_CHARS.sub("-", group).strip("-.")[-40:].strip("-.") or "group"
    return f"drl.{slug}.{digest}"


@functools.lru_cache(maxsize=2048)
def bucket_policy(name: str, limit: int, period: int, on_failure: str, alias: str) -> Policy:
    """The one-limit policy of a bucket: rate ``limit``/``period`` s, burst ``limit``,
    decided on the Redis of ``alias`` (``RATELIMIT_USE_CACHE``)."""
    raw = {"limits": [{"name": "n", "key": [VALUE], "rate": f"{limit}/{period}s", "burst": limit}],
           "on_failure": on_failure}
    policy = build_policy(name, raw, _CUSTOM, f"ratelimit rate {limit}/{period}s")
    return dataclasses.replace(policy, cache_alias=alias)
