"""Who may talk to the app, and which requests may change anything.

- Bound to a loopback address, the app answers only requests whose Host is a loopback name (so a web page
  cannot reach it through DNS rebinding). Bound elsewhere, every request needs the access token: given once as
  `?token=...` (printed at start), it becomes an HttpOnly, SameSite=Strict cookie.
- A state-changing request (POST) must carry the page's CSRF token, and, where the browser sends them, a
  same-origin `Origin` and `Sec-Fetch-Site`. A cross-site form post fails all three.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.requests import Request

TOKEN_COOKIE = "unveil_token"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; img-src 'self'; style-src 'self'; script-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # nothing leaves for other sites (a URL may briefly carry the token)
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def is_loopback(host: str) -> bool:
    """Whether a bind address or Host name is this machine only."""
    host = host.strip("[]")
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(host_header: str) -> str:
    """The name part of a Host header (`[::1]:8765` -> `::1`)."""
    return urlsplit(f"//{host_header}").hostname or ""


@dataclass
class Guard:
    """The app's access token (None: loopback without a token) and its CSRF token."""

    bind_host: str
    token: str | None = None
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    @classmethod
    def for_bind(cls, host: str, token: str | None) -> Guard:
        """A loopback bind needs no token unless given one; any other bind always has one."""
        if not token and not is_loopback(host):
            token = secrets.token_urlsafe(24)
        return cls(bind_host=host, token=token or None)

    def host_allowed(self, request: Request) -> bool:
        """Loopback binds answer loopback Host names only (DNS-rebinding defence)."""
        if not is_loopback(self.bind_host):
            return True
        return is_loopback(host_name(request.headers.get("host", "")))

    def token_ok(self, request: Request) -> bool:
        """Whether the request carries the access token (cookie, bearer header or `?token=`)."""
        if self.token is None:
            return True
        auth = request.headers.get("authorization", "")
        given = [
            request.cookies.get(TOKEN_COOKIE, ""),
            request.query_params.get("token", ""),
            auth[7:] if auth.lower().startswith("bearer ") else "",
        ]
        return any(g and hmac.compare_digest(g.encode(), self.token.encode()) for g in given)

    def same_origin(self, request: Request) -> bool:
        """A POST from this app's own pages: Sec-Fetch-Site and Origin, where sent, agree."""
        # Typed here: without the `ui` extra a request's headers are Any (a core install's `make lint`).
        site: str | None = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return False
        origin: str | None = request.headers.get("origin")
        if origin is None:
            return True  # a client that sends neither header still needs the CSRF token
        if origin == "null":  # privacy modes hide the origin; the browser's own same-origin verdict decides
            return site == "same-origin"
        host: str = request.headers.get("host", "")
        return urlsplit(origin).netloc == host

    def csrf_ok(self, given: str | None) -> bool:
        """Whether a form field or header carries this app's CSRF token."""
        return bool(given) and hmac.compare_digest(str(given).encode(), self.csrf.encode())
