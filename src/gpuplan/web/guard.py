"""The outermost layer of the web app, around everything else (ASGI middleware).

- security headers on every response: pages, JSON, 404, 413, 500 alike;
- Host and Origin checks: a server bound to loopback answers only to loopback names, so a web
  page that rebinds its own DNS name to 127.0.0.1 (DNS rebinding) gets 400, and a cross-origin
  page's request (Origin not the Host it was sent to) gets 403;
- request bodies over the limit are refused with 413 before anything parses them, chunked ones
  too: the body is read here, whole, before the app sees it (at most `body_limit` bytes), and
  one not received within BODY_TIMEOUT_S (a client that sends half and stalls) gets 408;
- an exception that escapes the app becomes a JSON 500 (never a reset connection); the
  traceback goes to the server's log, not to the client.

Every refusal has the API's error shape: {"detail": one line}.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "testserver"})
# "testserver" is the name Starlette's TestClient sends; no DNS resolves it to this machine.

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)

log = logging.getLogger("gpuplan.web")
BODY_TIMEOUT_S = 10.0  # the whole request body, however it is sent


class _TooLarge(Exception):
    pass


class _Gone(Exception):
    """The client went away before its body arrived."""


def host_name(host: str) -> str:
    """'127.0.0.1:8000' -> '127.0.0.1', '[::1]:8000' -> '::1', 'LocalHost' -> 'localhost'."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Guard:
    """Wrap an ASGI app: headers, Host/Origin, body limit, last-resort 500.

    hosts: the Host names this server answers to; None answers to any (a server the user
    deliberately exposed with --host 0.0.0.0).
    """

    def __init__(self, app: Any, body_limit: int, hosts: Iterable[str] | None) -> None:
        self.app, self.body_limit = app, body_limit
        self.hosts = None if hosts is None else frozenset(host_name(h) for h in hosts)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_with_headers(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in SECURITY_HEADERS if k not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        refusal = self._refusal(scope)
        if refusal is not None:
            await _answer(send_with_headers, *refusal)
            return
        try:
            body = await asyncio.wait_for(self._body(receive), BODY_TIMEOUT_S)
        except _TooLarge:
            await _answer(send_with_headers, 413, self._too_large())
            return
        except TimeoutError:
            await _answer(
                send_with_headers, 408, f"request body not received within {BODY_TIMEOUT_S:g} s"
            )
            return
        except _Gone:
            return
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect the app may wait for

        try:
            await self.app(scope, replay, send_with_headers)
        except Exception:
            log.exception("unhandled error in %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await _answer(send_with_headers, 500, "internal error")

    async def _body(self, receive: Any) -> bytes:
        """The whole request body, at most `body_limit` bytes (else _TooLarge, at once)."""
        chunks, seen = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone
            if message["type"] != "http.request":
                continue
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.body_limit:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _refusal(self, scope: dict) -> tuple[int, str] | None:
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        host = headers.get(b"host", b"").decode("latin-1")
        if self.hosts is not None and host_name(host) not in self.hosts:
            return 400, (
                f"Host {host[:100]!r} is not this server; it answers to"
                f" {', '.join(sorted(self.hosts - {'testserver'}))} only"
            )
        origin = headers.get(b"origin")
        if origin is not None and origin != b"null":
            netloc = urlsplit(origin.decode("latin-1")).netloc.lower()
            if netloc != host.lower():
                return 403, "cross-origin request refused: the page must come from this server"
        length = headers.get(b"content-length")
        if length is not None:
            try:
                too_big = int(length) > self.body_limit
            except ValueError:
                too_big = True
            if too_big:
                return 413, self._too_large()
        return None

    def _too_large(self) -> str:
        return f"request body larger than {self.body_limit // 1024} KiB; a config.json is a few KB"


async def _answer(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
