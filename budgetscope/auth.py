"""Bearer tokens and exposure checks shared by the servers that take requests from the network (`collect`, the
engine's API). Light at import: the standard library only."""

from __future__ import annotations

import hmac
import ipaddress
import os
from pathlib import Path


def bearer_ok(header: str | None, token: str | None) -> bool:
    """Whether an `Authorization` value is `Bearer <token>`; always True when no token is configured. Constant
    time in the token; the scheme is case-insensitive (RFC 7235)."""
    if token is None:
        return True
    scheme, _, value = (header or "").strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())


def is_loopback(host: str) -> bool:
    """Whether listening on `host` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any interface


def exposure_warning(host: str, has_auth: bool, has_tls: bool, how: str) -> str | None:
    """One line for stderr when a server on `host` is reachable from other machines without authentication, or
    sends its token in clear; None when it is not. `how`: the flag or variable that turns auth on."""
    if is_loopback(host):
        return None
    if not has_auth:
        return f"warning: listening on {host} without authentication: anyone who can reach this port can use it ({how})"
    if not has_tls:
        return f"warning: listening on {host} without TLS: the bearer token crosses the network in clear"
    return None


def read_token(path: str | os.PathLike | None, env: str) -> str | None:
    """The token from a file (its first line, stripped) or else the environment variable `env`; None when
    neither is set. ValueError (one line) for an unreadable or empty file."""
    if path is not None:
        try:
            text = Path(path).read_text().strip()
        except OSError as e:
            raise ValueError(f"cannot read the token file {path} ({e.strerror or e})") from None
        token = text.splitlines()[0].strip() if text else ""
        if not token:
            raise ValueError(f"the token file {path} is empty")
        return token
    return os.environ.get(env, "").strip() or None
