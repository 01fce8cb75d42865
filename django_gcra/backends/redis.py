"""The Redis backend: the composite GCRA script, run by EVALSHA on a django-redis connection."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from importlib.resources import files
from typing import Any

from redis.exceptions import NoScriptError, RedisError

from ..algorithm import ALLOWED
from .base import Backend, BackendError, LimitSpec, Outcome

SCRIPT = files(__package__).joinpath("gcra.lua").read_text(encoding="utf-8")
SCRIPT_SHA = hashlib.sha1(SCRIPT.encode()).hexdigest()


def script_args(specs: Sequence[LimitSpec], cost: int) -> list[Any]:
    """ARGV for the script: cost, then interval, burst and enforce flag per limit."""
    args: list[Any] = [cost]
    for spec in specs:
        args += (spec.interval, spec.burst, 1 if spec.enforce else 0)
    return args


def parse_reply(reply: Sequence[Any]) -> Outcome:
    enforced, would, retry, binding, now = (int(v) for v in reply[:5])
    rest = [int(v) for v in reply[5:]]
    return Outcome(
        enforced, would,
        None if retry < 0 else retry,
        None if enforced == ALLOWED and would == ALLOWED else binding - 1,
        now, tuple(rest[0::2]), tuple(rest[1::2]),
    )


def run_script(client: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
    """EVALSHA, loading the script once on NOSCRIPT (restart, failover, SCRIPT FLUSH)."""
    try:
        return client.evalsha(SCRIPT_SHA, len(keys), *keys, *args)
    except NoScriptError:
        client.script_load(SCRIPT)
        return client.evalsha(SCRIPT_SHA, len(keys), *keys, *args)


def django_redis_client(alias: str) -> Any:
    from django_redis import get_redis_connection

    return get_redis_connection(alias)


class RedisBackend(Backend):
    """One EVALSHA per decision on the client that ``get_client()`` returns."""

    def __init__(self, get_client: Callable[[], Any]) -> None:
        self.get_client = get_client

    def evaluate(self, specs: Sequence[LimitSpec], cost: int) -> Outcome:
        try:
            reply = run_script(self.get_client(), [s.key for s in specs], script_args(specs, cost))
        except RedisError as exc:
            raise BackendError(f"{type(exc).__name__}: {exc}") from exc
        return parse_reply(reply)

    def read_tats(self, keys: Sequence[str]) -> list[int | None]:
        try:
            values = self.get_client().mget(keys)
        except RedisError as exc:
            raise BackendError(f"{type(exc).__name__}: {exc}") from exc
        return [None if v is None else int(v) for v in values]
