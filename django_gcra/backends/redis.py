"""The Redis backend: the composite GCRA script, run by EVALSHA on the limiter's own clients
(``clients.py``: the servers of a django-redis cache alias, with tight timeouts), each
call through the circuit breaker of the endpoint that serves its keys.

On the asyncio path a decision's deadline is its command's round trip (``TIMEOUT``):
connections are set up by the pool outside it, and a failed set-up is counted against
the breaker once by the pool, not once per waiting decision (``ConnectionSetUpFailed``
is not counted here)."""

from __future__ import annotations

import hashlib
import operator
import weakref
from collections.abc import Callable, Coroutine, Sequence
from importlib.resources import files
from typing import Any

from redis.exceptions import (
    ClusterDownError,
    MasterDownError,
    NoScriptError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)

from ..algorithm import ALLOWED, CONCURRENCY, GCRA, QUOTA, SLIDING_LOG
from . import direct
from .base import Backend, BackendError, LimitSpec, Outcome
from .breaker import CLOSED, CircuitBreaker
from .clients import ConnectionSetUpFailed
from .direct import DirectRunner, evalsha
from .multiplex import Multiplexer, multiplexer_for
from .slots import SlotBook, SlotKeeper

# Errors that say the endpoint is unhealthy (and count towards its circuit breaker);
# any other ResponseError is a problem with one call (a script or data error).
_STORE_ERRORS = (RedisError, RedisClusterException)
_ENDPOINT_RESPONSE_ERRORS = (ReadOnlyError, ClusterDownError, TryAgainError, MasterDownError)


def _counts_against_endpoint(exc: BaseException) -> bool:
    if isinstance(exc, ConnectionSetUpFailed):  # the pool reported the failed set-up once already
        return False
    return not isinstance(exc, ResponseError) or isinstance(exc, _ENDPOINT_RESPONSE_ERRORS)

_new = tuple.__new__
SCRIPT = files(__package__).joinpath("gcra.lua").read_text(encoding="utf-8")
SCRIPT_SHA = hashlib.sha1(SCRIPT.encode()).hexdigest()
# decision.settle(): a metered cost's difference on every rate and quota limit, in one call.
SETTLE_SCRIPT = files(__package__).joinpath("settle.lua").read_text(encoding="utf-8")
SETTLE_SHA = hashlib.sha1(SETTLE_SCRIPT.encode()).hexdigest()


def settle_args(specs: Sequence[LimitSpec], delta: int, at: int) -> list[Any]:
    """ARGV for the settle script: delta, the decision's time, then per limit a, b and its
    algorithm (GCRA interval and burst; a sliding period and N; a quota's boundaries and units)."""
    args: list[Any] = [delta, at]
    for spec in specs:
        if spec.algorithm == QUOTA:
            args += (spec.calendar.argument(), spec.burst, QUOTA)
        elif spec.algorithm:
            args += (spec.period, spec.burst, spec.algorithm)
        else:
            args += (spec.interval, spec.burst, GCRA)
    return args


def script_args(specs: Sequence[LimitSpec], cost: int, least: int | None = None, max_wait: int = 0,
                token: str | None = None) -> list[Any]:
    """ARGV for the script: cost, then per limit interval, burst and enforce flag (GCRA),
    or period, N and 2 * algorithm + enforce (the sliding ones; a concurrency limit's ttl
    and max); then ``least`` for a take (as many units as fit, at most ``cost``, at least
    ``least``); then, shaping, ``max_wait`` (us a denied decision may wait for its own
    future slot); then, with concurrency limits, the holder ``token`` ('' fills a gap)."""
    args: list[Any] = [cost]
    for spec in specs:
        if spec.algorithm == QUOTA:  # the period starts around the store's expected time
            args += (spec.calendar.argument(), spec.burst, 9 if spec.enforce else 8)
        elif spec.algorithm:
            args += (spec.period, spec.burst, 2 * spec.algorithm + (1 if spec.enforce else 0))
        else:
            args += (spec.interval, spec.burst, 1 if spec.enforce else 0)
    if token is not None or max_wait > 0:
        args += ("" if least is None else least, max_wait if max_wait > 0 else "")
        if token is not None:
            args.append(token)
    elif least is not None:
        args.append(least)
    return args


_key_of = operator.itemgetter(0)  # LimitSpec.key
MISS = -9  # the script's time was outside a quota's boundaries (periods.Calendar)


def missed(reply: Sequence[Any], specs: Sequence[LimitSpec]) -> bool:
    """True when ``reply`` says the store's time is outside the boundaries sent for a
    quota: each quota's calendar then learns the store's time, and the call is sent again."""
    if reply[0] != MISS:
        return False
    for spec in specs:
        if spec.algorithm == QUOTA:
            spec.calendar.moved(reply[4])
    return True


def _has_concurrency(specs: Sequence[LimitSpec]) -> bool:
    for spec in specs:  # noqa: SIM110 (a loop: any() over a generator costs a frame per decision)
        if spec.algorithm == CONCURRENCY:
            return True
    return False


def concurrency_of(specs: Sequence[LimitSpec]) -> tuple[int, ...]:
    """The indices of the concurrency limits among ``specs``."""
    return tuple(i for i, s in enumerate(specs) if s.algorithm == CONCURRENCY)


def parse_reply(reply: Sequence[Any], take: bool = False, shaping: bool = False,
                concurrency: bool = False) -> Outcome:
    # Lua numbers arrive as Redis integer replies: Python ints already.
    enforced, would, retry, binding, now = reply[:5]
    rest = list(reply[5:])
    waited = rest.pop() if shaping else 0  # the script appended the wait of a reservation
    if concurrency:  # then, before it, the slots it found expired (RedisBackend._outcome counts them)
        rest.pop()
    granted = None
    if take:  # the script appended the units it decided on
        units = rest.pop()
        granted = units if enforced == ALLOWED else 0
    return _new(Outcome, (  # tuple.__new__ with every field: the named tuple's __new__ is one more frame
        enforced, would,
        None if retry < 0 else retry,
        None if enforced == ALLOWED and would == ALLOWED else binding - 1,
        now, tuple(rest[0::2]), tuple(rest[1::2]), granted, waited, None,
    ))


def run_script(client: Any, keys: Sequence[str], args: Sequence[Any], source: str = SCRIPT,
               sha: str = SCRIPT_SHA, runner: DirectRunner | None = None) -> Any:
    """EVALSHA, loading the script once on NOSCRIPT (restart, failover, SCRIPT FLUSH)."""
    try:
        return evalsha(client, runner, sha, keys, args)
    except NoScriptError:
        client.script_load(source)
        return evalsha(client, runner, sha, keys, args)


def run_settle(client: Any, keys: Sequence[str], args: Sequence[Any], runner: DirectRunner | None = None) -> Any:
    """``run_script`` of the settle script (``settle.lua``)."""
    return run_script(client, keys, args, SETTLE_SCRIPT, SETTLE_SHA, runner)


async def arun_settle(client: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
    """``arun_script`` of the settle script (``settle.lua``)."""
    return await arun_script(client, keys, args, SETTLE_SCRIPT, SETTLE_SHA)


async def arun_script(client: Any, keys: Sequence[str], args: Sequence[Any], source: str = SCRIPT,
                      sha: str = SCRIPT_SHA) -> Any:
    """``run_script`` on an asyncio client."""
    try:
        return await client.evalsha(sha, len(keys), *keys, *args)
    except NoScriptError:
        await client.script_load(source)
        return await client.evalsha(sha, len(keys), *keys, *args)


async def amux_script(mux: Multiplexer, keys: Sequence[str], args: Sequence[Any]) -> Any:
    """``arun_script`` through the loop's multiplexer: one EVALSHA in the next batch; on
    NOSCRIPT (this caller's own error reply) the script is loaded, once for all the callers
    that met NOSCRIPT meanwhile and in a batch too, and the call sent once more."""
    try:
        return await mux.execute("EVALSHA", SCRIPT_SHA, len(keys), *keys, *args)
    except NoScriptError:
        await mux.once("SCRIPT", "LOAD", SCRIPT)  # one load for every caller that met NOSCRIPT meanwhile
        return await mux.execute("EVALSHA", SCRIPT_SHA, len(keys), *keys, *args)


class RedisBackend(Backend):
    """One EVALSHA per decision on the client that ``get_client()`` returns.

    Async decisions use ``get_async_client()`` (a native asyncio client) when it
    returns one, so an async view never blocks the event loop on Redis. With a
    ``breaker_of(key)`` callable, every call goes through the circuit breaker it
    returns: while that is open, ``BackendError`` is raised without any network I/O.
    """

    def __init__(self, get_client: Callable[[], Any], get_async_client: Callable[[], Any] | None = None,
                 breaker_of: Callable[[str], CircuitBreaker] | None = None, slots: SlotBook | None = None,
                 keeper: SlotKeeper | None = None) -> None:
        self.get_client = get_client
        self.get_async_client = get_async_client
        self.breaker_of = breaker_of
        self.slots = SlotBook() if slots is None else slots  # (its engine's: store.Stores)
        self._keeper = keeper  # (given: another backend's, on the same store; see store.Stores.clocked)
        self._last_mux: tuple[Any, Multiplexer | None] = (None, None)  # the last async client and its multiplexer
        self._runner: tuple[Any, DirectRunner | None] = (None, None)  # the sync client's pool and its runner
        self._muxes: weakref.WeakKeyDictionary[Any, Multiplexer | None] = weakref.WeakKeyDictionary()

    @property
    def keeper(self) -> SlotKeeper:
        """Releases and extends this store's concurrency slots (a background thread, made once)."""
        if self._keeper is None:
            self._keeper = self.slots.keeper(self.get_client, self.get_async_client)
        return self._keeper

    def _direct(self, client: Any) -> DirectRunner | None:
        """The direct runner of ``client``'s pool (one per backend; replaced with the pool)."""
        pool = getattr(client, "connection_pool", None)
        last = self._runner
        if last[0] is not pool:
            last = self._runner = (pool, None if pool is None else direct.runner_for(pool))
        return last[1]

    def multiplexer(self, client: Any) -> Multiplexer | None:
        """The multiplexer of an asyncio client (one per client: per event loop)."""
        try:
            return self._muxes[client]
        except KeyError:
            mux = self._muxes[client] = multiplexer_for(client)
            return mux

    def _outcome(self, reply: Sequence[Any], specs: Sequence[LimitSpec], cost: int, least: int | None,
                 max_wait: int, token: str | None) -> Outcome:
        outcome = parse_reply(reply, least is not None, max_wait > 0, token is not None)
        if token is None:
            return outcome
        stats = self.slots.stats
        stats.add("expired", reply[-2 if max_wait > 0 else -1])
        conc = concurrency_of(specs)
        if outcome.enforced != ALLOWED:
            if any(outcome.binding == i for i in conc):
                stats.add("refused")
            return outcome
        if cost <= 0:
            return outcome
        keys = tuple(specs[i].key for i in conc)
        ttls = tuple(specs[i].period for i in conc)
        return outcome._replace(slots=self.keeper.acquired(keys, ttls, token))

    def _breaker(self, keys: Sequence[str]) -> CircuitBreaker | None:
        if self.breaker_of is None:
            return None
        breaker = self.breaker_of(keys[0])
        breaker.before_call()  # raises CircuitOpen (a BackendError) while open
        return breaker

    @staticmethod
    def _failed(breaker: CircuitBreaker | None, exc: BaseException) -> BackendError:
        if breaker is not None:
            if _counts_against_endpoint(exc):
                breaker.failure(exc)
            else:
                breaker.release_probe()
        return BackendError(f"{type(exc).__name__}: {exc}")

    def evaluate(self, specs: Sequence[LimitSpec], cost: int, max_wait: int = 0) -> Outcome:
        return self._run(specs, cost, None, max_wait)

    def take(self, specs: Sequence[LimitSpec], most: int, least: int) -> Outcome:
        return self._run(specs, most, least)

    def take_ahead(self, specs: Sequence[LimitSpec], most: int, least: int,
                   done: Callable[[Outcome | None], None]) -> Callable[[], None] | None:
        runner = self._direct(self.get_client())
        link = None if runner is None else runner.ahead_link()
        if link is None:  # cluster, Sentinel, TLS, not connected yet
            return None
        keys = [*map(_key_of, specs)]
        breaker = self._breaker(keys)  # raises CircuitOpen (nothing sent) while open

        def on_reply(reply: Any) -> None:
            if isinstance(reply, BaseException):  # NOSCRIPT too: the next call on the request path loads it
                self._failed(breaker, reply)
                done(None)
                return
            if breaker is not None:
                breaker.success()
            done(parse_reply(reply, take=True))

        link.send(("EVALSHA", SCRIPT_SHA, len(keys), *keys, *script_args(specs, most, least)), on_reply)
        return link.collect

    # The coroutine of ``_arun`` itself (no coroutine around it: one frame less per decision).
    def aevaluate(self, specs: Sequence[LimitSpec], cost: int, max_wait: int = 0) -> Coroutine[Any, Any, Outcome]:
        return self._arun(specs, cost, None, max_wait)

    def atake(self, specs: Sequence[LimitSpec], most: int, least: int) -> Coroutine[Any, Any, Outcome]:
        return self._arun(specs, most, least)

    def _run(self, specs: Sequence[LimitSpec], cost: int, least: int | None, max_wait: int = 0) -> Outcome:
        keys = [*map(_key_of, specs)]
        breaker = self._breaker(keys)
        token = self.slots.new_token() if _has_concurrency(specs) else None
        try:
            client = self.get_client()
            runner = self._direct(client)
            reply = run_script(client, keys, script_args(specs, cost, least, max_wait, token), SCRIPT, SCRIPT_SHA,
                               runner)
            if reply[0] == MISS and missed(reply, specs):  # (nothing was written; the boundaries moved)
                reply = run_script(client, keys, script_args(specs, cost, least, max_wait, token), SCRIPT,
                                   SCRIPT_SHA, runner)
        except _STORE_ERRORS as exc:
            raise self._failed(breaker, exc) from exc
        if breaker is not None:
            breaker.success()
        return self._outcome(reply, specs, cost, least, max_wait, token)

    async def _arun(self, specs: Sequence[LimitSpec], cost: int, least: int | None, max_wait: int = 0) -> Outcome:
        keys = [*map(_key_of, specs)]
        try:
            client = self.get_async_client() if self.get_async_client else None
        except _STORE_ERRORS as exc:
            raise BackendError(f"{type(exc).__name__}: {exc}") from exc
        if client is None:
            if least is None:
                return await super().aevaluate(specs, cost, max_wait)
            return await super().atake(specs, cost, least)
        breaker = self._breaker(keys)
        last = self._last_mux
        if last[0] is client:
            mux = last[1]
        else:
            mux = self.multiplexer(client)
            self._last_mux = (client, mux)
        token = self.slots.new_token() if _has_concurrency(specs) else None
        try:
            if mux is None:
                reply = await arun_script(client, keys, script_args(specs, cost, least, max_wait, token))
            else:  # amux_script, inline
                command = ("EVALSHA", SCRIPT_SHA, len(keys), *keys, *script_args(specs, cost, least, max_wait, token))
                try:
                    reply = await mux.execute(*command)
                except NoScriptError:
                    await mux.once("SCRIPT", "LOAD", SCRIPT)  # one load for every caller that met NOSCRIPT meanwhile
                    reply = await mux.execute(*command)
            if reply[0] == MISS and missed(reply, specs):  # (nothing was written)
                reply = await arun_script(client, keys, script_args(specs, cost, least, max_wait, token))
        except _STORE_ERRORS as exc:
            failed = self._failed(breaker, exc)
            if breaker is not None and breaker.state != CLOSED:  # decisions queued for a connection: now
                reason = f"circuit open for {breaker.endpoint}"
                abandon = getattr(getattr(client, "connection_pool", None), "abandon_waiters", None)
                if abandon is not None:
                    abandon(reason)
                if mux is not None:
                    mux.abandon(ConnectionSetUpFailed(reason))
            raise failed from exc
        if breaker is not None:
            breaker.success()
        return self._outcome(reply, specs, cost, least, max_wait, token)

    def settle(self, specs: Sequence[LimitSpec], delta: int, at: int) -> int:
        keys = [*map(_key_of, specs)]
        breaker = self._breaker(keys)
        try:
            client = self.get_client()
            reply = run_settle(client, keys, settle_args(specs, delta, at), self._direct(client))
            if reply[0] == MISS:  # a quota's boundaries around the store's time, once more
                for spec in specs:
                    if spec.algorithm == QUOTA:
                        spec.calendar.moved(reply[1])
                reply = run_settle(client, keys, settle_args(specs, delta, at), self._direct(client))
        except _STORE_ERRORS as exc:
            raise self._failed(breaker, exc) from exc
        if breaker is not None:
            breaker.success()
        return int(reply[1])

    async def asettle(self, specs: Sequence[LimitSpec], delta: int, at: int) -> int:
        keys = [*map(_key_of, specs)]
        try:
            client = self.get_async_client() if self.get_async_client else None
        except _STORE_ERRORS as exc:
            raise BackendError(f"{type(exc).__name__}: {exc}") from exc
        if client is None:
            return await super().asettle(specs, delta, at)
        breaker = self._breaker(keys)
        try:
            reply = await arun_settle(client, keys, settle_args(specs, delta, at))
            if reply[0] == MISS:
                for spec in specs:
                    if spec.algorithm == QUOTA:
                        spec.calendar.moved(reply[1])
                reply = await arun_settle(client, keys, settle_args(specs, delta, at))
        except _STORE_ERRORS as exc:
            raise self._failed(breaker, exc) from exc
        if breaker is not None:
            breaker.success()
        return int(reply[1])

    def read_tats(self, keys: Sequence[str]) -> list[int | None]:
        try:
            values = self.get_client().mget(keys)
        except _STORE_ERRORS as exc:
            raise BackendError(f"{type(exc).__name__}: {exc}") from exc
        return [None if v is None or not v.isdigit() else int(v) for v in values]

    def read_states(self, specs: Sequence[LimitSpec]) -> list[Any]:
        try:
            client = self.get_client()
            states: list[Any] = []
            for spec in specs:  # one key at a time: a cluster may serve them from one slot only
                if spec.algorithm == SLIDING_LOG:
                    entries = client.zrange(spec.key, 0, -1, withscores=True)
                    states.append(tuple(sorted(int(score) for _, score in entries)) or None)
                    continue
                value = client.get(spec.key)
                if value is None:
                    states.append(None)
                elif spec.algorithm == GCRA:
                    states.append(int(value))
                elif spec.algorithm == QUOTA:
                    start, used = (int(part) for part in value.split(b":"))
                    states.append((start, used))
                else:
                    start, cur, prev = (int(part) for part in value.split(b":"))
                    states.append((start, cur, prev))
        except _STORE_ERRORS as exc:
            raise BackendError(f"{type(exc).__name__}: {exc}") from exc
        return states
