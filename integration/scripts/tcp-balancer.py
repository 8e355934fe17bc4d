#!/usr/bin/env python3
"""A plain TCP load balancer on loopback, as kubespray's nginx-proxy or an
haproxy in TCP mode puts in front of several kube-apiservers: each new
connection goes to the next backend in turn (one that refuses is skipped),
and its bytes are relayed untouched (TLS ends at the API server, whose
certificate names 127.0.0.1). It knows nothing of HTTP: when a backend dies
its connections close, and every watch on them breaks; when one freezes they
hang until the client's own keep-alive gives up.

    tcp-balancer.py LISTEN_PORT HOST:PORT [HOST:PORT...]

Prints one line when listening. Runs until killed.
"""
import asyncio
import itertools
import sys


async def pump(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


def main():
    listen = int(sys.argv[1])
    backends = [tuple(b.rsplit(":", 1)) for b in sys.argv[2:]]
    turn = itertools.cycle(range(len(backends)))

    async def serve(client_reader, client_writer):
        for _ in range(len(backends)):
            host, port = backends[next(turn)]
            try:
                up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 3)
                break
            except (OSError, asyncio.TimeoutError):
                continue
        else:
            client_writer.close()
            return
        await asyncio.gather(pump(client_reader, up_writer), pump(up_reader, client_writer))

    async def run():
        server = await asyncio.start_server(serve, "127.0.0.1", listen, backlog=1024)
        print(f"tcp-balancer: 127.0.0.1:{listen} -> {', '.join(':'.join(b) for b in backends)}", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    main()
