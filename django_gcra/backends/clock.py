"""The test clock's hook: while one is installed, the store's scripts read it instead of ``TIME``.

``django_gcra.testing.limiter_clock()`` installs a ``ScriptClock`` here (this process only;
the package itself never does). Nothing on a decision's path reads ``active``: the store
(``store._built_for``) reads it when it builds a policy's backend, and
``testing.limiter_clock`` makes every backend and plan be built again when a clock starts
and when it stops (``conf.forget_built``). While a clock is installed a decision goes to a
``RedisBackend`` on ``ClockedClient``/``AsyncClockedClient``: one plain redis-py ``EVAL``
of the script's source with ``clocked()``'s prelude, which answers ``redis.call('TIME')``
with the clock's time (a literal in the script's text) and lengthens every expiry the
script sets by ``HOLD`` (a clock that stands still must not see keys expire in real time).

``install()`` refuses unless Django's test environment is set up
(``django.test.utils.setup_test_environment()``, which both pytest-django and Django's
test runner call): no setting, header or stray import can install a clock in production.
"""

from __future__ import annotations

import hashlib
from typing import Any

from redis.exceptions import NoScriptError

__all__ = ["HOLD", "AsyncClockedClient", "ClockedClient", "ScriptClock", "clocked", "in_test_environment",
           "install", "require_test_environment", "uninstall"]

HOLD = 86_400  # seconds added to every expiry a clocked script sets


class ScriptClock:
    """A store time that moves only when told (integer microseconds since the epoch)."""

    __slots__ = ("now_us",)

    def __init__(self, now_us: int) -> None:
        self.now_us = now_us


#: The installed clock, or None (always, outside tests).
active: ScriptClock | None = None


def in_test_environment() -> bool:
    """True between ``setup_test_environment()`` and ``teardown_test_environment()``
    (``django.core.mail.outbox`` exists exactly then: Django documents it for tests)."""
    from django.core import mail

    return hasattr(mail, "outbox")


def require_test_environment() -> None:
    """``RuntimeError`` unless Django's test environment is set up."""
    if not in_test_environment():
        raise RuntimeError("limiter_clock() runs only in a test environment (django.test.utils."
                           "setup_test_environment(): pytest-django and Django's test runner call it)")


def install(clock: ScriptClock) -> None:
    """Make ``clock`` the store's time for this process's scripts; ``RuntimeError`` outside
    a test environment, or while another clock is installed."""
    global active
    require_test_environment()
    if active is not None:
        raise RuntimeError("a limiter_clock() is already active in this process")
    active = clock


def uninstall(clock: ScriptClock) -> None:
    global active
    if active is clock:
        active = None


_PRELUDE = """local clock_time, clock_redis = {'%d', '%d'}, redis
local redis = setmetatable({call = function(command, ...)
  local name, args = string.upper(command), {...}
  if name == 'TIME' then return {clock_time[1], clock_time[2]} end
  if name == 'PEXPIRE' or name == 'EXPIRE' then
    args[2] = tonumber(args[2]) + (name == 'PEXPIRE' and %d or %d)
  elseif name == 'SET' then
    for i = 3, #args - 1 do
      local option = string.upper(tostring(args[i]))
      if option == 'PX' then args[i + 1] = tonumber(args[i + 1]) + %d
      elseif option == 'EX' then args[i + 1] = tonumber(args[i + 1]) + %d end
    end
  end
  return clock_redis.call(command, unpack(args))
end}, {__index = clock_redis})
"""


def clocked(script: str, now_us: int) -> str:
    """``script`` reading ``now_us`` as the store's ``TIME``, its expiries ``HOLD`` longer."""
    prelude = _PRELUDE % (now_us // 1_000_000, now_us % 1_000_000, HOLD * 1000, HOLD, HOLD * 1000, HOLD)
    if script.startswith("#!"):  # a shebang line stays first
        first, _, rest = script.partition("\n")
        return f"{first}\n{prelude}{rest}"
    return prelude + script


# The scripts loaded through a clocked client, by SHA1 (EVALSHA is answered with EVAL of their
# clocked source): every script the limiter sends, loaded once per process on its first NOSCRIPT.
_sources: dict[str, str] = {}


def _source(sha: str) -> str:
    source = _sources.get(sha)
    if source is None:
        raise NoScriptError("NOSCRIPT No matching script (django_gcra's test clock: load it first).")
    return source


def _load(script: str) -> str:
    sha = hashlib.sha1(script.encode()).hexdigest()
    _sources[sha] = script
    return sha


def _now() -> int:
    clock = active
    if clock is None:
        raise RuntimeError("the limiter_clock() has stopped")
    return clock.now_us


class ClockedClient:
    """A sync redis-py client whose scripts read the installed clock (a plain ``EVAL`` each:
    no direct runner, no pipelining). Every other command goes to the client as it is."""

    connection_pool = None  # no direct runner (backends/direct.py) for this client: redis-py's EVAL

    def __init__(self, client: Any) -> None:
        self.client = client

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        return self.client.eval(clocked(_source(sha), _now()), numkeys, *keys_and_args)

    def eval(self, script: str, numkeys: int, *keys_and_args: Any) -> Any:
        return self.client.eval(clocked(script, _now()), numkeys, *keys_and_args)

    def script_load(self, script: str) -> str:
        return _load(script)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


class AsyncClockedClient:
    """``ClockedClient`` for a redis-py asyncio client (no multiplexer: one ``EVAL`` each)."""

    connection_pool = None  # not a SetUpPool: backends/multiplex.py leaves it alone

    def __init__(self, client: Any) -> None:
        self.client = client

    async def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        return await self.client.eval(clocked(_source(sha), _now()), numkeys, *keys_and_args)

    async def eval(self, script: str, numkeys: int, *keys_and_args: Any) -> Any:
        return await self.client.eval(clocked(script, _now()), numkeys, *keys_and_args)

    async def script_load(self, script: str) -> str:
        return _load(script)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)
