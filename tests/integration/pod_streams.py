"""pods/exec and pods/portforward through the API server (kubernetes.stream), as the
tests need them: exec returning stdout *and* the error channel (a failed exec is
otherwise an empty string), and an HTTP GET through a port-forward; plus a tiny HTTP
server on loopback for the forward to reach."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kubernetes import client
from kubernetes.stream import portforward, stream
from kubernetes.stream.ws_client import ERROR_CHANNEL

STREAM_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ExecResult:
    stdout: str
    stderr: str
    error: str | None  # the error channel's message when the exec failed, else None


def exec_in_pod(
    core: client.CoreV1Api, namespace: str, pod: str, command: Sequence[str]
) -> ExecResult:
    ws: Any = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        namespace,
        command=list(command),
        stdout=True,
        stderr=True,
        stdin=False,
        tty=False,
        _preload_content=False,
    )
    try:
        ws.run_forever(timeout=STREAM_TIMEOUT_S)
        stdout, stderr = ws.read_stdout(), ws.read_stderr()
        raw = ws.read_channel(ERROR_CHANNEL)
    finally:
        ws.close()
    error: str | None = None
    if raw:
        status = json.loads(raw)
        if status.get("status") != "Success":
            error = str(status.get("message") or status)
    return ExecResult(stdout, stderr, error)


def http_get_through_port_forward(
    core: client.CoreV1Api, namespace: str, pod: str, port: int, path: str = "/"
) -> str:
    """GET `path` on `port` of the pod through pods/portforward; the response body.
    OSError (ConnectionError) when the forward carries no response."""
    pf: Any = portforward(
        core.connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port)
    )
    sock = pf.socket(port)
    sock.settimeout(STREAM_TIMEOUT_S)
    try:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep:
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    None,
                )
                if length is not None and len(body) >= length:
                    return body[:length].decode()
            chunk = sock.recv(65536)  # the forward does not pass the server's close on
            if not chunk:
                raise ConnectionError(
                    f"port-forward to {namespace}/{pod}:{port} closed without a response "
                    f"(error: {pf.error(port)!r})"
                )
            data += chunk
    finally:
        sock.close()
        pf.close()


class _TextHandler(BaseHTTPRequestHandler):
    text = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(self.text)))
        self.end_headers()
        self.wfile.write(self.text)

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextlib.contextmanager
def serve_text_on_loopback(text: str) -> Iterator[int]:
    """An HTTP server on 127.0.0.1:<free port> answering every GET with `text`; yields
    the port."""
    handler = type("TextHandler", (_TextHandler,), {"text": text.encode()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
