"""A TCP proxy on 127.0.0.1 that delays Redis traffic, for the benchmarks' slow-Redis cases."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def start_proxy(listen: int, target: int, delay: Callable[[], float], upstream: bool) -> asyncio.AbstractServer:
    """Forward 127.0.0.1:``listen`` to 127.0.0.1:``target``, holding each chunk ``delay()``
    seconds: the client-to-server chunks when ``upstream``, else the server-to-client ones."""

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, slow: bool) -> None:
        try:
            while data := await reader.read(65536):
                if slow and (hold := delay()):
                    await asyncio.sleep(hold)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_writer.close()
            return
        try:
            await asyncio.gather(pump(client_reader, server_writer, upstream),
                                 pump(server_reader, client_writer, not upstream))
        except asyncio.CancelledError:
            pass  # the benchmark is over

    return await asyncio.start_server(handle, "127.0.0.1", listen)
