"""Carry TCP connections across a network namespace boundary through a Unix socket.

A client run under `unshare -rn` sees only its own loopback, so nothing can reach a vendor; the
portal under test listens on the test's loopback. Inside the namespace `python3 nsbridge.py PORT
SOCKET` listens on 127.0.0.1:PORT and pipes each connection to SOCKET (the filesystem is shared);
outside, `UnixToTcp(SOCKET, PORT)` pipes SOCKET to the portal's 127.0.0.1:PORT. The client then uses
the very URL the generated files hold. Standard library only: it runs under the system python3.
"""

from __future__ import annotations

import os
import socket
import sys
import threading


def _pipe(a: socket.socket, b: socket.socket) -> None:
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _serve(listener: socket.socket, connect) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        try:
            upstream = connect()
        except OSError:
            conn.close()
            continue
        for a, b in ((conn, upstream), (upstream, conn)):
            threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


class UnixToTcp:
    """Outside the namespace: SOCKET → 127.0.0.1:PORT, in a daemon thread."""

    def __init__(self, path: str, port: int) -> None:
        self.path, self.port = path, port
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(64)
        threading.Thread(target=_serve, args=(self.listener, self._connect), daemon=True).start()

    def _connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=30)

    def close(self) -> None:
        self.listener.close()
        if os.path.exists(self.path):
            os.unlink(self.path)


def main(port: int, path: str) -> None:
    """Inside the namespace: 127.0.0.1:PORT → SOCKET, until killed."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)

    def connect() -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        return s

    print("ready", flush=True)
    _serve(listener, connect)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
