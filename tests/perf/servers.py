"""Servers the benchmarks run against: SecantusDB in a process of its own
(``server_process``: the benchmark's process then holds only the client), and behind a
loopback TCP proxy that holds every chunk for a fixed delay each way (``delayed``: a
server at a chosen round-trip time, 1 ms inside a cloud region, 20 ms across regions).

Each direction of each connection is a queue of ``(due, bytes)`` that a thread sends on
at ``due`` (the chunk's arrival plus the delay), in order: the delay adds to every round
trip without limiting throughput (pipelined replies stay pipelined), as a long link does.
Threads and ``time.sleep``, not an event loop: an event loop's poll waits in whole
milliseconds, which would turn a 0.5 ms delay into 1.
"""

from __future__ import annotations

import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from pymongo import MongoClient


@contextmanager
def server_process() -> Iterator[str]:
    """A SecantusDB server in its own process: its URI."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as storage:
        args = [sys.executable, "-m", "secantus", "--port", str(port), "--storage-path", storage]
        server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            uri = f"mongodb://127.0.0.1:{port}/?directConnection=true"
            probe_client: MongoClient[dict[str, object]] = MongoClient(
                uri, serverSelectionTimeoutMS=30_000
            )
            probe_client.admin.command("ping")
            probe_client.close()
            yield uri
        finally:
            server.terminate()
            server.wait()


class DelayProxy:
    """Forwards ``127.0.0.1:<port>`` to ``host:port``, ``rtt_ms / 2`` each way."""

    def __init__(self, host: str, port: int, rtt_ms: float) -> None:
        self.target = (host, port)
        self.delay = rtt_ms / 2000
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        self._closing = False

    def start(self) -> int:
        """Start accepting connections; the local port."""
        threading.Thread(target=self._accept, daemon=True).start()
        return self.port

    def stop(self) -> None:
        self._closing = True
        self._listener.close()
        for sock in self._open:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._open.append(sock)
            self._pipe(client, upstream)
            self._pipe(upstream, client)

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        chunks: queue.Queue[tuple[float, bytes]] = queue.Queue()

        def receive() -> None:
            try:
                while chunk := source.recv(1 << 16):
                    chunks.put((time.perf_counter() + self.delay, chunk))
            except OSError:
                pass
            chunks.put((0.0, b""))

        def send() -> None:
            while True:
                due, chunk = chunks.get()
                if not chunk:
                    break
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                try:
                    sink.sendall(chunk)
                except OSError:
                    break
            with suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

        threading.Thread(target=receive, daemon=True).start()
        threading.Thread(target=send, daemon=True).start()


@contextmanager
def delayed(uri: str, rtt_ms: float) -> Iterator[str]:
    """``uri`` (``mongodb://host:port/...``, one host) reached through a ``DelayProxy``
    adding ``rtt_ms`` to each round trip: the proxy's URI, for a direct connection."""
    hostport = uri.split("://", 1)[1].split("/", 1)[0]
    host, port = hostport.rsplit(":", 1)
    proxy = DelayProxy(host, int(port), rtt_ms)
    local = proxy.start()
    try:
        yield f"mongodb://127.0.0.1:{local}/?directConnection=true"
    finally:
        proxy.stop()
