"""How requests reach the API server: HTTP from the standard library, or the
`kubernetes` package's ApiClient.

Why two: importing `kubernetes` costs about half a second, three times a whole
`kubectl patch`, so `spilloverctl` speaks HTTP itself (`HttpTransport`) when the
kubeconfig is a plain one (server, CA, client certificate or token: `plain_kubeconfig`).
Anything else (exec plugins, auth providers, proxies, merged kubeconfig lists, the
in-cluster account) goes through the ApiClient (`ApiClientTransport`), as do
connections made from an ApiClient (tests, the harness). Both answer with the raw JSON
bytes the server sent, and raise `HttpStatusError` for an HTTP error status and
`OSError`/`http.client.HTTPException` when the server cannot be reached.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

Query = list[tuple[str, str]]
Timeout = tuple[float, float]
JSON = "application/json"
# A kept connection idle longer than this is closed rather than reused: the API server
# closes its own after 90 s idle, load balancers often after 60 s, and a request sent
# on a connection the server closed fails where a new one would not.
IDLE_REUSE_S = 30.0
# What sending on a kept connection the server closed meanwhile raises: the request is
# sent once more on a new connection (a TLS connection cut without close_notify gives
# SSLEOFError, "EOF occurred in violation of protocol").
_CLOSED_MEANWHILE = (
    http.client.RemoteDisconnected,
    ConnectionResetError,
    BrokenPipeError,
    ssl.SSLEOFError,
)
ANY = "*/*"  # a container's log, an endpoint behind the proxy: whatever it sends


class HttpStatusError(Exception):
    """The API server answered with an error status (`status`, `reason`, the `body` it
    sent): the fields `_api.api_error` reads, as on the kubernetes package's
    ApiException."""

    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(f"HTTP {status} {reason}")
        self.status = status
        self.reason = reason
        self.body = body


class Transport(Protocol):
    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: Timeout,
        accept: str = JSON,
    ) -> bytes:
        """The body the server answered; `accept` is the Accept header (an API object is
        JSON; a container's log or an endpoint behind the API server's proxy may be
        anything: `*/*`)."""
        ...

    def stream(self, path: str, *, query: Query, timeout: Timeout) -> Iterator[bytes]:
        """The lines of a streamed answer (a watch), as they arrive."""
        ...

    def api_client(self) -> Any:
        """A kubernetes ApiClient on the same credentials (built on first use)."""
        ...


def _url(path: str, query: Query | None) -> str:
    return path + ("?" + urllib.parse.urlencode(query) if query else "")


class HttpTransport:
    """HTTPS with the standard library; keeps idle connections for reuse (thread-safe:
    one connection per request in flight)."""

    def __init__(
        self,
        server: str,
        context: ssl.SSLContext | None,
        headers: Mapping[str, str],
        make_api_client: Callable[[], Any],
        extra_headers: Sequence[tuple[str, str]] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server = server.rstrip("/")
        parsed = urllib.parse.urlsplit(server)
        self.https = parsed.scheme == "https"
        self.host = parsed.hostname or "localhost"
        self.port = parsed.port or (443 if self.https else 80)
        self.prefix = parsed.path.rstrip("/")
        self.context = context
        self.headers = dict(headers)
        # Headers that may repeat (Impersonate-Group), sent after `headers`.
        self.extra_headers = list(extra_headers)
        self._make_api_client = make_api_client
        self._api_client: Any = None
        # kept connections, with when each was last used (`clock`)
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []
        self._clock = clock
        self._lock = threading.Lock()

    def _connect(self, timeout: Timeout) -> http.client.HTTPConnection:
        if self.https:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout[0], context=self.context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout[0])

    def _send(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        url: str,
        payload: bytes | None,
        headers: dict[str, str],
        timeout: Timeout,
    ) -> http.client.HTTPResponse:
        conn.timeout = timeout[0]
        if conn.sock is None:
            conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(timeout[1])
        # http.client's request() takes a mapping: one value per header. A header given
        # more than once (one Impersonate-Group per group) needs putheader.
        conn.putrequest(method, self.prefix + url)
        for name, value in [*headers.items(), *self.extra_headers]:
            conn.putheader(name, value)
        if payload is not None or method in ("POST", "PUT", "PATCH"):
            conn.putheader("Content-Length", str(len(payload or b"")))
        conn.endheaders(payload)
        return conn.getresponse()

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: Timeout,
        accept: str = JSON,
    ) -> bytes:
        payload = None if body is None else json.dumps(body).encode()
        headers = {**self.headers, "Accept": accept}
        if payload is not None:
            headers["Content-Type"] = content_type or "application/json"
        url = _url(path, query)
        conn = self._kept()
        reused = conn is not None
        if conn is None:
            conn = self._connect(timeout)
        try:
            try:
                resp = self._send(conn, method, url, payload, headers, timeout)
            except _CLOSED_MEANWHILE:
                if not reused:
                    raise
                conn.close()  # a kept connection the server closed meanwhile: once more
                conn = self._connect(timeout)
                resp = self._send(conn, method, url, payload, headers, timeout)
            data = resp.read()
        except BaseException:
            conn.close()
            raise
        if resp.will_close:
            conn.close()
        else:
            with self._lock:
                self._idle.append((conn, self._clock()))
        if resp.status >= 400:
            raise HttpStatusError(resp.status, resp.reason, data.decode("utf-8", "replace"))
        return data

    def _kept(self) -> http.client.HTTPConnection | None:
        """The most recently used kept connection idle less than IDLE_REUSE_S (older
        ones are closed), or None."""
        stale: list[http.client.HTTPConnection] = []
        with self._lock:
            now = self._clock()
            fresh = [(c, at) for c, at in self._idle if now - at < IDLE_REUSE_S]
            stale = [c for c, at in self._idle if now - at >= IDLE_REUSE_S]
            self._idle = fresh
            conn = self._idle.pop()[0] if self._idle else None
        for old in stale:
            old.close()
        return conn

    def stream(self, path: str, *, query: Query, timeout: Timeout) -> Iterator[bytes]:
        conn = self._connect(timeout)
        try:
            headers = {**self.headers, "Accept": "application/json"}
            resp = self._send(conn, "GET", _url(path, query), None, headers, timeout)
            if resp.status >= 400:
                raise HttpStatusError(
                    resp.status, resp.reason, resp.read().decode("utf-8", "replace")
                )
            while True:
                line = resp.readline()
                if not line:
                    return
                if line.strip():
                    yield line
        finally:
            conn.close()

    def api_client(self) -> Any:
        with self._lock:
            if self._api_client is None:
                self._api_client = self._make_api_client()
            return self._api_client


class ApiClientTransport:
    """Requests through a kubernetes ApiClient (its configuration: credentials, proxy)."""

    def __init__(self, api_client: Any) -> None:
        self._client = api_client

    def _call(
        self,
        method: str,
        path: str,
        query: Query | None,
        body: Any,
        content_type: str | None,
        timeout: Timeout,
        accept: str = JSON,
    ) -> Any:
        """The kubernetes package's RESTResponse (its urllib3 response unread)."""
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        method, url, headers, body, _ = self._client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        resp = self._client.call_api(
            method, url, header_params=headers, body=body, _request_timeout=timeout
        )
        if resp.status >= 400:
            data = resp.read()
            text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
            raise HttpStatusError(int(resp.status), str(resp.reason or ""), text)
        return resp

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: Timeout,
        accept: str = JSON,
    ) -> bytes:
        resp = self._call(method, path, query, body, content_type, timeout, accept)
        data = resp.read()
        return data if isinstance(data, bytes) else str(data).encode()

    def stream(self, path: str, *, query: Query, timeout: Timeout) -> Iterator[bytes]:
        resp = self._call("GET", path, query, None, None, timeout).response
        buf = b""
        try:
            for chunk in resp.stream(65536):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield line
        finally:
            resp.release_conn()

    def api_client(self) -> Any:
        return self._client


class _HeadersAdded:
    """A kubernetes RESTClientObject that adds headers (which may repeat: one
    Impersonate-Group per group) to every request; everything else is the wrapped one's."""

    def __init__(self, inner: Any, headers: Sequence[tuple[str, str]]) -> None:
        self._inner = inner
        self._headers = list(headers)

    def request(self, method: str, url: str, headers: Any = None, **kwargs: Any) -> Any:
        from urllib3 import HTTPHeaderDict

        merged = HTTPHeaderDict(headers or {})
        for name, value in self._headers:
            merged.add(name, value)
        return self._inner.request(method, url, headers=merged, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def with_headers(api_client: Any, headers: Sequence[tuple[str, str]]) -> Any:
    """`api_client`, sending `headers` with every request it makes (ours and those of
    the kubernetes API classes over it). The ApiClient's default headers hold one value
    per name, so its REST client is wrapped instead."""
    if headers:
        api_client.rest_client = _HeadersAdded(api_client.rest_client, headers)
        api_client.added_headers = list(headers)
    return api_client


# ---- a plain kubeconfig, read without the kubernetes package ------------------------


class NotPlain(Exception):
    """The kubeconfig needs the kubernetes package's loader (say why, for debugging)."""


@dataclass(frozen=True)
class PlainConfig:
    contexts: list[dict[str, Any]]
    active: dict[str, Any] | None
    doc: dict[str, Any]


def read_plain(path: str) -> PlainConfig:
    """Parse one kubeconfig file (NotPlain if it is a list of files, or unreadable:
    the kubernetes loader then reports it)."""
    if os.pathsep in path:
        raise NotPlain("a list of kubeconfig files")
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise NotPlain(str(exc)) from None
    doc = _parse_kubeconfig(text)
    if not isinstance(doc, dict):
        raise NotPlain("not a mapping")
    for kind in ("contexts", "clusters", "users"):
        if not isinstance(doc.get(kind) or [], list):
            raise NotPlain(f"{kind} is not a list")
    contexts = [c for c in doc.get("contexts") or [] if isinstance(c, dict)]
    current = doc.get("current-context")
    active = next((c for c in contexts if c.get("name") == current), None)
    return PlainConfig(contexts, active, doc)


def _parse_kubeconfig(text: str) -> Any:
    """A kubeconfig's document. JSON (a subset of YAML; what some tools write, and the
    local control plane of the tests) is read with `json`, without importing `yaml`
    (about 10 ms of a `spilloverctl kill`); anything else with yaml's safe loader (the
    C one when available)."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass  # YAML in flow style, or broken: yaml decides, and names the problem
    import yaml

    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise NotPlain(str(exc)) from None


def _named(doc: Mapping[str, Any], kind: str, name: Any, key: str) -> dict[str, Any]:
    for entry in doc.get(kind) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(key)
            if isinstance(value, dict):
                return value
    raise NotPlain(f"no {kind} entry {name!r}")


def _material(entry: Mapping[str, Any], key: str, base: str) -> bytes | None:
    """`key-data` (base64) or the file `key` (relative to the kubeconfig's directory)."""
    data = entry.get(f"{key}-data")
    if isinstance(data, str) and data:
        return base64.b64decode(data)
    path = entry.get(key)
    if isinstance(path, str) and path:
        with open(os.path.join(base, os.path.expanduser(path)), "rb") as fh:
            return fh.read()
    return None


_USER_KEYS = {
    "as",
    "as-groups",
    "as-uid",
    "as-user-extra",
    "client-certificate",
    "client-certificate-data",
    "client-key",
    "client-key-data",
    "token",
    "tokenFile",
}
_CLUSTER_KEYS = {
    "server",
    "certificate-authority",
    "certificate-authority-data",
    "insecure-skip-tls-verify",
    "tls-server-name",
    "extensions",
}


def plain_transport(
    path: str,
    context: Mapping[str, Any],
    make_api_client: Callable[[], Any],
    extra_headers: Sequence[tuple[str, str]] = (),
) -> HttpTransport:
    """An HttpTransport for `context` of the kubeconfig at `path`, or NotPlain;
    `extra_headers` go with every request (impersonation: `client.kubeconfig`)."""
    config = read_plain(path)
    ctx = context.get("context") or {}
    if not isinstance(ctx, dict):
        raise NotPlain("a context that is not a mapping")
    cluster = _named(config.doc, "clusters", ctx.get("cluster"), "cluster")
    user = _named(config.doc, "users", ctx.get("user"), "user") if ctx.get("user") else {}
    extra = (set(cluster) - _CLUSTER_KEYS) | (set(user) - _USER_KEYS)
    if extra:
        raise NotPlain(f"needs the full loader for {sorted(extra)}")
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise NotPlain("no server")
    base = os.path.dirname(os.path.abspath(os.path.expanduser(path)))
    headers: dict[str, str] = {"User-Agent": "spillover-ops"}
    try:
        token = user.get("token")
        if not token and user.get("tokenFile"):
            with open(os.path.join(base, str(user["tokenFile"])), encoding="utf-8") as fh:
                token = fh.read().strip()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        context_ssl: ssl.SSLContext | None = None
        if server.startswith("https://"):
            if cluster.get("tls-server-name"):
                raise NotPlain("tls-server-name")
            context_ssl = _ssl_context(cluster, base)
            cert = _material(user, "client-certificate", base)
            key = _material(user, "client-key", base)
            if (cert is None) != (key is None):
                raise NotPlain("a client certificate without its key")
            if cert is not None and key is not None:
                _load_chain(context_ssl, cert, key)
    except (OSError, ValueError, ssl.SSLError) as exc:
        raise NotPlain(str(exc)) from None
    return HttpTransport(server, context_ssl, headers, make_api_client, extra_headers)


def _ssl_context(cluster: Mapping[str, Any], base: str) -> ssl.SSLContext:
    """The TLS context for a cluster entry: its CA alone when it names one (as kubectl
    does), the system's CAs otherwise, no verification with insecure-skip-tls-verify.

    One context, built once: loading the system's CA store takes about 30 ms, which a
    kubeconfig with its own CA (the usual case) never needs."""
    if cluster.get("insecure-skip-tls-verify"):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    ca = _material(cluster, "certificate-authority", base)
    if ca is not None:
        return ssl.create_default_context(cadata=ca.decode("ascii"))
    return ssl.create_default_context()


def _load_chain(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl loads a certificate chain from files only: anonymous in-memory files where
    the system has them (Linux: the key never touches a disk, and no `tempfile`
    import), else a private temporary directory, removed at once."""
    if _load_chain_in_memory(context, cert, key):
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="spillover-tls-") as tmp:
        cert_path, key_path = os.path.join(tmp, "cert"), os.path.join(tmp, "key")
        for where, data in ((cert_path, cert), (key_path, key)):
            fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        context.load_cert_chain(cert_path, key_path)


def _load_chain_in_memory(context: ssl.SSLContext, cert: bytes, key: bytes) -> bool:
    """load_cert_chain from two memfd files (read through /proc/self/fd); False when
    the system offers none (then the caller writes temporary files)."""
    if not hasattr(os, "memfd_create") or not os.path.isdir("/proc/self/fd"):
        return False
    fds: list[int] = []
    try:
        for name, data in (("cert", cert), ("key", key)):
            fd = os.memfd_create(f"spillover-tls-{name}", os.MFD_CLOEXEC)
            fds.append(fd)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        paths = [f"/proc/self/fd/{fd}" for fd in fds]
    except OSError:
        return False  # memfd_create refused (a sandbox): temporary files instead
    else:
        context.load_cert_chain(paths[0], paths[1])
        return True
    finally:
        for fd in fds:
            os.close(fd)
