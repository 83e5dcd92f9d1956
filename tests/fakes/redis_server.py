"""A private redis-server for a test, on a port of its own, that the test can stall.

    with RedisServer() as server:        # redis://127.0.0.1:PORT/0, nothing saved to disk
        server.url
        with server.stalled():           # SIGSTOP; SIGCONT on the way out, whatever happened
            ...                          # connections are accepted by the kernel and hang
        server.restart()                 # a new server on the same port: everything in it is gone
        server.connections()             # connections it has accepted so far (INFO stats)
        server.messages("celery")        # the Celery messages waiting in a queue: [(task, args)]

A stopped server is what an operator sees when Redis hangs (swapped out, paused container, a
debugger, a stuck disk): not a refused connection but one that never answers.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from tests.fakes.processes import stop
from tests.services import free_port, require_binary


class RedisServer:
    def __init__(self) -> None:
        self.binary = require_binary("redis-server", "apt-get install redis-server")
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._asked = 1  # the server's own client (`__enter__`)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> RedisServer:
        self.port = free_port()
        self._launch()
        return self

    def _launch(self) -> None:
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        # The first client waits for the server (retries connecting until it listens).
        self.client = redis.Redis.from_url(
            self.url,
            socket_timeout=10,
            retry_on_error=[redis.ConnectionError],
            retry=redis.retry.Retry(redis.backoff.ConstantBackoff(0.05), 200),
        )
        self.client.ping()

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGCONT)
            stop(self.process)

    def restart(self) -> None:
        """What an operator's restart of a Redis without persistence does: the clients' connections
        are closed and every counter is gone; the new server listens on the same port."""
        stop(self.process)
        self.client.close()
        self._asked = 1
        self._launch()

    @contextmanager
    def stalled(self) -> Iterator[None]:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.process.pid, signal.SIGCONT)

    def connections(self) -> int:
        """Connections the server has accepted so far, not counting the one asking. Asked on a new
        connection: after a stall the server accepts, in order, the connections the kernel queued
        meanwhile, and this one last, before it reads this one's command."""
        with redis.Redis.from_url(self.url, socket_timeout=10) as client:
            total = int(client.info("stats")["total_connections_received"])
        self._asked += 1
        return total - self._asked

    def messages(self, queue: str) -> list[tuple[str, Any]]:
        """(task name, args) of each Celery message waiting in `queue`, oldest first."""
        out = []
        for raw in reversed(self.client.lrange(queue, 0, -1)):  # LPUSHed: the newest is first
            message = json.loads(raw)
            headers = message["headers"]
            body = json.loads(base64.b64decode(message["body"]))
            args = body[0] if isinstance(body, list) else ast.literal_eval(headers["argsrepr"])
            out.append((headers["task"], tuple(args)))
        return out
