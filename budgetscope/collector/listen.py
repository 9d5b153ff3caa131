"""Where the receivers listen: a host checked before either binds, and why a bind failed, in words.

gRPC reports a failed bind without a reason (its log says "address lookup failed" or nothing), and Python
reads `--host 0` as 0.0.0.0 where gRPC cannot: both receivers must take the same host, or neither starts.
"""

from __future__ import annotations

import errno
import ipaddress
import socket


class HostError(ValueError):
    """The host names no address both receivers can listen on. The message is one line."""


def check_host(host: str) -> None:
    """Raise HostError unless `host` is an IP address written in full or a name that resolves."""
    try:
        ipaddress.ip_address(host.strip("[]"))
        return
    except ValueError:
        pass
    if host.replace(".", "").isdigit():  # 0, 127.1: C's inet_aton reads them, gRPC's resolver does not
        raise HostError(
            f"cannot listen on {host}: not an address as written (0.0.0.0 listens on every "
            "interface, 127.0.0.1 on this machine only)"
        )
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise HostError(f"cannot listen on {host}: the name lookup failed ({e.strerror})") from None


def bind_failure(e: OSError) -> str:
    """Why binding failed, in words: the port in use, a privileged port, an address not of this machine."""
    if e.errno == errno.EACCES:
        return f"{e.strerror}: ports below 1024 need root or CAP_NET_BIND_SERVICE"
    if e.errno == errno.EADDRINUSE:
        return f"{e.strerror}: another process listens on it"
    if e.errno == errno.EADDRNOTAVAIL:
        return f"{e.strerror}: not an address of this machine"
    return e.strerror or str(e)


def why_not(host: str, port: int) -> str | None:
    """Why nothing can listen on host:port, learnt by binding a plain socket there as the HTTP receiver does;
    None if that works. Asked before gRPC binds (its failure logs a line of its own, without the reason)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]"), port))
            probe.listen(1)
        except OSError as e:
            return bind_failure(e)
    return None
