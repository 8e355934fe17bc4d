#!/usr/bin/env python3
"""A TCP relay on loopback that can be cut into a black hole and restored:
the link between a node-local watchmux and kube-apiserver in
reboot-scenario.sh (TLS passes through untouched; the API server's
certificate names 127.0.0.1).

    blackhole-relay.py LISTEN_PORT TARGET_HOST:TARGET_PORT

SIGUSR1 cuts, SIGUSR2 restores. While cut, the relay behaves as a network
that drops every packet, not as a stopped server: connections are still
accepted (the kernel completes the handshake), nothing is forwarded in
either direction and nothing is closed, so a client sees its requests go
unanswered until its own timeouts fire, never a refusal or a reset.
Connections that were open when the link was cut, or opened while it was
cut, stay black holes; restoring closes them (their byte streams have
holes now, as TCP would end them after its retries) and relays new ones.
Prints one line per state change. Runs until killed.
"""
import asyncio
import signal
import sys

cut = False
# Connections whose bytes have been dropped: closed when the link returns.
swallowed = set()


async def pump(reader, writer, conn):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if cut or conn in swallowed:
                swallowed.add(conn)
                continue  # dropped on the floor; the sender gets no answer
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        if writer is not None:
            writer.close()


async def main():
    listen_port, target = int(sys.argv[1]), sys.argv[2]
    host, port = target.rsplit(":", 1)
    open_conns = {}

    async def handle(client_reader, client_writer):
        conn = object()
        if cut:
            swallowed.add(conn)
        up_writer = None
        try:
            if conn not in swallowed:
                try:
                    up_reader, up_writer = await asyncio.open_connection(host, int(port))
                except OSError:
                    client_writer.close()
                    return
            else:
                up_reader = None
            open_conns[conn] = (client_writer, up_writer)
            if up_reader is None:
                # Cut at accept: read and drop until restored (then closed).
                await pump(client_reader, None, conn)
                return
            await asyncio.gather(pump(client_reader, up_writer, conn), pump(up_reader, client_writer, conn))
        finally:
            open_conns.pop(conn, None)
            swallowed.discard(conn)

    def set_cut(value):
        global cut
        cut = value
        if value:
            swallowed.update(open_conns)
        else:
            for conn in list(swallowed):
                for w in open_conns.get(conn, ()):
                    if w is not None:
                        w.close()
            swallowed.clear()
        print("cut" if value else "restored", f"({len(open_conns)} connections open)", flush=True)

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, set_cut, True)
    loop.add_signal_handler(signal.SIGUSR2, set_cut, False)
    server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
    print(f"relaying 127.0.0.1:{listen_port} -> {target}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
