"""A TCP proxy on a fixed loopback port whose target can change while it runs: the API
server's URL a user's kubeconfig names stays the same while the cluster behind it is
replaced (``integration.byo_user``'s re-pointed context, which a URL-only identity misses).

``python -m integration.apiproxy PORT TARGET_FILE``: listens on ``127.0.0.1:PORT``; every
new connection goes to the ``HOST:PORT`` the target file holds at that moment (bytes pass
through unchanged: TLS is between the client and the API server). Stdlib only.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from pathlib import Path


def parse_target(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (the file's first line), checked."""
    lines = text.strip().splitlines()
    host, sep, port = (lines[0] if lines else "").rpartition(":")
    if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"not HOST:PORT: {text.strip()[:80]!r}")
    return host, int(port)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def _handle(client: socket.socket, target_file: Path) -> None:
    try:
        upstream = socket.create_connection(parse_target(target_file.read_text()), timeout=10)
    except (OSError, ValueError) as e:
        print(f"apiproxy: cannot reach the target: {e}", file=sys.stderr, flush=True)
        client.close()
        return
    upstream.settimeout(None)
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def serve(port: int, target_file: Path, ready: threading.Event | None = None) -> None:
    with socket.create_server(("127.0.0.1", port), reuse_port=False) as listener:
        if ready is not None:
            ready.set()
        while True:
            client, _ = listener.accept()
            threading.Thread(target=_handle, args=(client, target_file), daemon=True).start()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit():
        print("usage: python -m integration.apiproxy PORT TARGET_FILE", file=sys.stderr)
        return 2
    serve(int(argv[0]), Path(argv[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
