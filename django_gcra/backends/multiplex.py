"""Async multiplexing: the concurrent decisions of one event loop share a few connections.

A ``Multiplexer`` sits on one asyncio ``SetUpPool`` (one per event loop and alias, see
``clients.py``). A decision's command is queued and sent by a *lane*: a task that takes
one connection from the pool, writes every command queued at that moment in one write
(a pipeline, each command still its own EVALSHA), reads their replies in order, hands
each to its caller, gives the connection back, and goes again while commands are
queued. So:

- at most ``lanes`` connections (``ASYNC_LANES``, 4) carry the loop's decisions;
- a lone decision never waits for company: with a lane free it is sent on the next
  turn of the loop; commands that arrive while every lane is in flight go out together
  in the next batch (at most ``MAX_BATCH`` per write);
- a reply is matched to its caller by position on its connection; an error reply
  (``NOSCRIPT``, a script error) is that caller's own, the connection stays in step;
- each command is bounded by the pool's round-trip deadline (``TIMEOUT``, a loop-fair
  ``FairTimer`` armed when the lane takes the connection, just before the write): when
  it passes, every caller still waiting on that connection gets ``redis.TimeoutError``
  and the socket is aborted, so a late reply is never read as anyone's answer (the pool
  sets a fresh connection up, outside any decision's deadline);
- a caller that is cancelled is skipped (queued) or its reply read and dropped (sent).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from .clients import SentinelSetUpPool, SetUpPool
from .direct import _pack, new_reader

__all__ = ["ASYNC_LANES", "MAX_BATCH", "Multiplexer", "multiplexer_for"]

ASYNC_LANES = 4  # connections per event loop and alias that carry decisions
# Commands per write. A batch shares one round-trip deadline (TIMEOUT), and Redis runs its
# scripts one after another: 32 keeps a batch's server time far inside the 10 ms default
# (a longer queue spreads over the lanes, then waits for the next batch).
MAX_BATCH = 32

_Call = tuple[tuple[Any, ...], "asyncio.Future[Any]"]


def _copy(exc: BaseException) -> BaseException:
    """A fresh exception per caller (raising one instance in many tasks chains their tracebacks)."""
    try:
        copy = type(exc)(*exc.args)
    except Exception:
        return exc
    copy.__cause__ = exc
    return copy


class Multiplexer:
    """Commands of one event loop, pipelined over at most ``lanes`` connections of ``pool``."""

    def __init__(self, pool: Any, lanes: int = ASYNC_LANES, max_batch: int = MAX_BATCH) -> None:
        self.pool, self.lanes, self.max_batch = pool, max(1, lanes), max(1, max_batch)
        self._queue: deque[_Call] = deque()
        self._running = 0  # lane tasks alive
        self._ready = 0  # lanes alive and not in flight: they will take what is queued
        self._tasks: set[asyncio.Task[None]] = set()
        self._once: dict[Any, asyncio.Future[Any]] = {}
        self.batches = self.commands = self.largest = 0  # counters (benchmarks, tests)

    def execute(self, *args: Any) -> asyncio.Future[Any]:
        """Send one command with the next batch: a future of its reply, or its error (queued
        at once; a future, not a coroutine around one: a frame less per decision)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append((args, future))
        if not self._ready and self._running < self.lanes:
            self._start(loop)
        return future

    async def once(self, *args: Any) -> Any:
        """``execute(*args)`` sent once for every caller that asks while it is in flight
        (``SCRIPT LOAD`` after a batch of NOSCRIPT replies: one load, not one per caller)."""
        future = self._once.get(args)
        if future is None:
            future = self._once[args] = asyncio.ensure_future(self.execute(*args))
            future.add_done_callback(lambda _: self._once.pop(args, None))
        return await asyncio.shield(future)  # one caller's cancellation does not cancel the others'

    def abandon(self, reason: BaseException) -> None:
        """Answer every queued (not yet sent) command now with ``reason``."""
        while self._queue:
            _, future = self._queue.popleft()
            if not future.done():
                future.set_exception(_copy(reason))

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._running += 1
        self._ready += 1
        task = loop.create_task(self._lane())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _take(self) -> list[_Call]:
        batch: list[_Call] = []
        queue = self._queue
        while queue and len(batch) < self.max_batch:
            call = queue.popleft()
            if not call[1].done():  # a cancelled caller is skipped
                batch.append(call)
        return batch

    async def _lane(self) -> None:
        try:
            while self._queue:
                await self._one_batch()
        finally:
            self._running -= 1
            self._ready -= 1
            if self._queue and not self._ready and self._running < self.lanes:  # e.g. after a cancellation
                self._start(asyncio.get_running_loop())

    async def _one_batch(self) -> None:
        try:
            connection = await self.pool.get_connection("EVALSHA")
        except Exception as exc:  # no connection (a failed set-up, the circuit opened): these callers fail
            for _, future in self._take():
                future.set_exception(_copy(exc))
            return
        batch = self._take()
        if not batch:
            await self.pool.release(connection)
            return
        self._ready -= 1
        if self._queue and not self._ready and self._running < self.lanes:
            self._start(asyncio.get_running_loop())  # more than one batch queued: another lane
        self.batches += 1
        self.commands += len(batch)
        self.largest = max(self.largest, len(batch))
        answered = 0
        try:
            if _pack is None:
                packed = connection.pack_commands([args for args, _ in batch])
            else:  # hiredis packs in C; redis-py's packer checks and encodes every argument in Python
                packed = [b"".join([_pack(args) for args, _ in batch])]
            await connection.send_packed_command(packed, check_health=False)
            stream = getattr(connection, "_reader", None) if _pack is not None else None
            if isinstance(stream, asyncio.StreamReader):
                # The batch's replies parsed by a hiredis reader of its own, from as few reads
                # of the stream as they arrive in (redis-py's read_response: a coroutine chain
                # per reply). A timeout is the stream's exception (the pool's FairTimer).
                reader = new_reader()
                for _, future in batch:
                    reply = reader.gets()
                    while reply is False:
                        data = await stream.read(65536)
                        if not data:
                            raise RedisConnectionError("Connection closed by server.")
                        reader.feed(data)
                        reply = reader.gets()
                    if not future.done():
                        if isinstance(reply, ResponseError):  # that caller's own: the connection is in step
                            future.set_exception(reply)
                        else:
                            future.set_result(reply)
                    answered += 1
            else:
                for _, future in batch:
                    try:
                        reply = await connection.read_response()
                    except ResponseError as exc:  # a whole error reply: the connection is still in step
                        if not future.done():
                            future.set_exception(exc)
                    else:
                        if not future.done():
                            future.set_result(reply)
                    answered += 1
        except BaseException as exc:
            # A timeout, a lost connection or this task's cancellation: the connection is
            # out of step, so no later reply is read from it; the unanswered callers fail.
            await connection.disconnect(nowait=True)
            for _, future in batch[answered:]:
                if future.done():
                    continue
                if isinstance(exc, Exception):
                    future.set_exception(_copy(exc))
                else:  # the lane was cancelled (its loop is closing): so are its callers
                    future.cancel()
            if not isinstance(exc, Exception):
                raise
        finally:
            self._ready += 1
            await self.pool.release(connection)


def multiplexer_for(client: Any, lanes: int = ASYNC_LANES) -> Multiplexer | None:
    """A new multiplexer of an asyncio client on a ``SetUpPool`` (``RedisBackend`` keeps
    one per client, hence per event loop); None for any other client (Redis Cluster: one
    call each)."""
    pool = getattr(client, "connection_pool", None)
    if not isinstance(pool, (SetUpPool, SentinelSetUpPool)):
        return None
    return Multiplexer(pool, lanes)
