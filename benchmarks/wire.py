"""Count the commands a client writes: redis-py's own commands and pipelines at the one
method every redis-py write goes through (``send_packed_command``), and django_gcra's
``EVALSHA`` where its direct runner writes to the socket (``direct._send``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from redis.connection import AbstractConnection

from django_gcra.backends import direct


def command_names(packed: bytes) -> list[str]:
    """The lower-cased name of every command in a buffer of RESP arrays."""
    names, i = [], 0
    while i < len(packed):
        end = packed.index(b"\r\n", i)
        count, i = int(packed[i + 1:end]), end + 2
        for k in range(count):
            end = packed.index(b"\r\n", i)
            size, i = int(packed[i + 1:end]), end + 2
            if k == 0:
                names.append(packed[i:i + size].decode().lower())
            i += size + 2
    return names


@contextlib.contextmanager
def watching_writes(record: Callable[[list[str]], object]) -> Iterator[None]:
    """Call ``record`` with the command names of every write while the block runs (one
    call per write: a pipeline's commands come in one list)."""
    original = AbstractConnection.send_packed_command

    def counting(self, command, *args, **kwargs):
        chunks = [command] if isinstance(command, (str, bytes)) else command
        record(command_names(b"".join(c.encode() if isinstance(c, str) else bytes(c) for c in chunks)))
        return original(self, command, *args, **kwargs)

    send = direct._send

    def counting_send(sock, data):
        record(command_names(bytes(data)))
        return send(sock, data)

    AbstractConnection.send_packed_command = counting
    direct._send = counting_send
    try:
        yield
    finally:
        AbstractConnection.send_packed_command = original
        direct._send = send


@contextlib.contextmanager
def sent_commands() -> Iterator[list[str]]:
    """Collect, while the block runs, the name of every command sent (one entry each)."""
    sent: list[str] = []
    with watching_writes(sent.extend):
        yield sent
