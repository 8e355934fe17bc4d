#!/usr/bin/env python3
"""A TCP relay on loopback that limits each direction to a byte rate: a slow
link between watchmux and the API server for bench-compress.sh (TLS passes
through untouched; the API server's certificate names 127.0.0.1).

    throttle-relay.py LISTEN_PORT TARGET_HOST:TARGET_PORT BYTES_PER_SECOND

Each direction of each connection gets the rate on its own (a token bucket
refilled continuously, reads of at most 16 KiB). Runs until killed.
"""
import asyncio
import sys
import time


async def pump(reader, writer, rate):
    allowance, last = 0.0, time.monotonic()
    try:
        while True:
            data = await reader.read(16384)
            if not data:
                break
            now = time.monotonic()
            allowance = min(allowance + (now - last) * rate, rate / 10)
            last = now
            allowance -= len(data)
            if allowance < 0:
                await asyncio.sleep(-allowance / rate)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def main():
    listen_port, target, rate = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    host, port = target.rsplit(":", 1)

    async def handle(client_reader, client_writer):
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pump(client_reader, up_writer, rate), pump(up_reader, client_writer, rate))

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
