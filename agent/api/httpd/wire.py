"""The HTTP/1.1 wire format of agent/api/httpd: request heads in, replies out. Pure: no I/O.

Only what a read-only JSON endpoint needs: a request line and header fields (no body is ever
read), replies with a Content-Length in one buffer. Errors are the REST contract's shape,
{"error": "..."}.
"""

from __future__ import annotations

import email.utils
import http.client
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus

MAX_HEAD = 8192  # bytes of request line + header fields (Apache's LimitRequestLine is 8190)
SERVER = "vswitch-agent"
JSON_TYPE = "application/json"


@dataclass(frozen=True)
class Response:
    status: HTTPStatus
    content_type: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


def error_response(status: HTTPStatus, message: str,
                   headers: Mapping[str, str] | None = None) -> Response:
    """The documented error shape, {"error": "..."}, for every refusal."""
    body = json.dumps({"error": message}, indent=2, sort_keys=True).encode() + b"\n"
    return Response(status, JSON_TYPE, body, dict(headers or {}))


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    keep_alive: bool


class BadRequest(Exception):
    """A head this server refuses; the reply is `status` and the connection is closed."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def parse_head(head: bytes) -> Request:
    """A complete request head (up to, without, the blank line) -> Request, or BadRequest."""
    line, _, rest = head.partition(b"\n")
    words = line.rstrip(b"\r").decode("iso-8859-1").split()
    if len(words) != 3:
        raise BadRequest(HTTPStatus.BAD_REQUEST, f"Bad request syntax ({_cut(words)})")
    method, target, version = words
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise BadRequest(HTTPStatus.BAD_REQUEST, f"Bad request version ({version[:20]!r})")
    try:
        headers = http.client.parse_headers(io.BytesIO(rest + b"\r\n"))
    except http.client.HTTPException as exc:  # more than 100 fields, or one line too long
        raise BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, str(exc)) from exc
    connection = {t.strip().lower() for t in headers.get("Connection", "").split(",")}
    keep_alive = "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection
    # Bodies are never read here (every route is a GET): a request that announces one would
    # leave its body where the next request's head is expected, so its connection ends.
    if headers.get("Transfer-Encoding") or headers.get("Content-Length", "0").strip() != "0":
        keep_alive = False
    return Request(method, target, keep_alive)


def _cut(words: Sequence[str]) -> str:
    text = " ".join(words)
    return repr(text if len(text) <= 80 else text[:75] + "...")


def render(response: Response, keep_alive: bool) -> bytes:
    """Status line, headers and body in one buffer: one write, so Nagle never holds a part."""
    lines = [
        f"HTTP/1.1 {response.status.value} {response.status.phrase}",
        f"Server: {SERVER}",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        "Cache-Control: no-store",
        *(f"{name}: {value}" for name, value in response.headers.items()),
    ]
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body


def request_target(head: bytes) -> str:
    """The request target of a head, cheaply (the lane choice); "" when there is none."""
    words = head.split(b"\r\n", 1)[0].split(b"\n", 1)[0].split()
    return words[1].decode("iso-8859-1") if len(words) == 3 else ""


def head_end(buf: bytearray) -> tuple[int, int]:
    """Where the head ends and the separator's length; (-1, 0) while incomplete. Bare LF line
    ends are accepted as http.server accepted them."""
    crlf = buf.find(b"\r\n\r\n")
    lf = buf.find(b"\n\n")
    if lf >= 0 and (crlf < 0 or lf < crlf):
        return lf, 2
    return (crlf, 4) if crlf >= 0 else (-1, 0)


