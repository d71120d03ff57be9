"""Which IP addresses a URL from untrusted input may reach, and URL parsing with errors that name the URL.

One table, `SPECIAL_PURPOSE`, transcribes IANA's IPv4 and IPv6 Special-Purpose Address Registries (with the
multicast blocks and deprecated site-local IPv6 added), so the verdict is the same on every Python version: the
standard library's `is_global` / `is_private` changed between 3.11 and 3.13 (3.11 passes 192.0.0.8, 64:ff9b:1::/48,
3fff::/20 and 5f00::/16).

An address is public when no block of the table that holds it is refused. The registry's "globally reachable"
column decides; a block marked N/A there is refused, except the transition forms that carry an IPv4 address (the
IPv4-mapped form, the NAT64 well-known prefix 64:ff9b::/96, 6to4), whose verdict is that of the IPv4 address they
lead to. A block holds a more specific globally reachable one at times (192.0.0.9 in 192.0.0.0/24, ORCHIDv2 and
Teredo in 2001::/23): the address is refused all the same, since any refused block that holds it refuses it
(anycast service addresses serve no images, and Teredo is an obsolete tunnel). Beyond the table, an IPv6 address
must lie in 2000::/3, the only space IANA allocates for global unicast, unless it is one of the IPv4-carrying
forms.
"""

from __future__ import annotations

import ipaddress
from typing import Literal
from urllib.parse import SplitResult, urlsplit

from tools.errors import UnveilError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Verdict = bool | Literal["embedded"]

EMBEDDED: Literal["embedded"] = "embedded"  # the verdict of the IPv4 address the IPv6 form carries

# (block, name in the registry, globally reachable). Sources: iana-ipv4-special-registry and
# iana-ipv6-special-registry (N/A entered as False, or as EMBEDDED for the IPv4-carrying forms), RFC 5771 and
# RFC 4291 (multicast), RFC 3879 (site-local).
_TABLE: tuple[tuple[str, str, Verdict], ...] = (
    ("0.0.0.0/8", "this network", False),
    ("0.0.0.0/32", "this host on this network", False),
    ("10.0.0.0/8", "private-use", False),
    ("100.64.0.0/10", "shared address space", False),
    ("127.0.0.0/8", "loopback", False),
    ("169.254.0.0/16", "link local", False),
    ("172.16.0.0/12", "private-use", False),
    ("192.0.0.0/24", "IETF protocol assignments", False),
    ("192.0.0.0/29", "IPv4 service continuity prefix", False),
    ("192.0.0.8/32", "IPv4 dummy address", False),
    ("192.0.0.9/32", "port control protocol anycast", True),
    ("192.0.0.10/32", "traversal using relays around NAT anycast", True),
    ("192.0.0.170/32", "NAT64/DNS64 discovery", False),
    ("192.0.0.171/32", "NAT64/DNS64 discovery", False),
    ("192.0.2.0/24", "documentation (TEST-NET-1)", False),
    ("192.31.196.0/24", "AS112-v4", True),
    ("192.52.193.0/24", "AMT", True),
    ("192.88.99.0/24", "deprecated (6to4 relay anycast)", False),
    ("192.168.0.0/16", "private-use", False),
    ("192.175.48.0/24", "direct delegation AS112 service", True),
    ("198.18.0.0/15", "benchmarking", False),
    ("198.51.100.0/24", "documentation (TEST-NET-2)", False),
    ("203.0.113.0/24", "documentation (TEST-NET-3)", False),
    ("224.0.0.0/4", "multicast", False),
    ("240.0.0.0/4", "reserved", False),
    ("255.255.255.255/32", "limited broadcast", False),
    ("::1/128", "loopback", False),
    ("::/128", "unspecified", False),
    ("::ffff:0:0/96", "IPv4-mapped", EMBEDDED),
    ("64:ff9b::/96", "IPv4-IPv6 translation", EMBEDDED),
    ("64:ff9b:1::/48", "IPv4-IPv6 translation (local use)", False),
    ("100::/64", "discard-only", False),
    ("100:0:0:1::/64", "dummy IPv6 prefix", False),
    ("2001::/23", "IETF protocol assignments", False),
    ("2001::/32", "Teredo", EMBEDDED),
    ("2001:1::1/128", "port control protocol anycast", True),
    ("2001:1::2/128", "traversal using relays around NAT anycast", True),
    ("2001:1::3/128", "DNS-SD service registration protocol anycast", True),
    ("2001:2::/48", "benchmarking", False),
    ("2001:3::/32", "AMT", True),
    ("2001:4:112::/48", "AS112-v6", True),
    ("2001:10::/28", "deprecated (ORCHID)", False),
    ("2001:20::/28", "ORCHIDv2", True),
    ("2001:30::/28", "drone remote ID protocol entity tags", True),
    ("2001:db8::/32", "documentation", False),
    ("2002::/16", "6to4", EMBEDDED),
    ("2620:4f:8000::/48", "direct delegation AS112 service", True),
    ("3fff::/20", "documentation", False),
    ("5f00::/16", "segment routing (SRv6) SIDs", False),
    ("fc00::/7", "unique-local", False),
    ("fe80::/10", "link-local unicast", False),
    ("fec0::/10", "site-local (deprecated)", False),
    ("ff00::/8", "multicast", False),
)
SPECIAL_PURPOSE: tuple[tuple[Network, str, Verdict], ...] = tuple(
    (ipaddress.ip_network(block), name, verdict) for block, name, verdict in _TABLE
)
GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")


def embedded_ipv4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address leads to, for the transition forms that carry one (IPv4-mapped, NAT64's
    64:ff9b::/96, 6to4, Teredo's client address)."""
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr.teredo is not None:
        return addr.teredo[1]
    if addr in ipaddress.ip_network("64:ff9b::/96"):
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


def refusal(addr: IPAddress) -> str | None:
    """Why `addr` may not be reached from untrusted input (the registry block that refuses it), or None."""
    embedded = False
    for net, name, verdict in SPECIAL_PURPOSE:
        if addr.version != net.version or addr not in net:
            continue
        if verdict is False:
            return f"{name} ({net})"
        embedded = embedded or verdict == EMBEDDED
    if isinstance(addr, ipaddress.IPv6Address):
        v4 = embedded_ipv4(addr) if embedded else None
        if v4 is not None:
            why = refusal(v4)
            return f"carries {v4}, {why}" if why else None
        if addr not in GLOBAL_UNICAST_V6:
            return "outside IPv6 global unicast (2000::/3)"
    return None


def is_public_address(addr: IPAddress) -> bool:
    """Whether `addr` is globally reachable by the table above (and, for IPv6 forms that carry an IPv4 address,
    that address too)."""
    return refusal(addr) is None


class BadURLError(UnveilError, ValueError):
    """A URL that cannot be used; the message names the URL."""


def split_url(
    url: str, *, what: str = "URL", schemes: tuple[str, ...] = ("http", "https")
) -> tuple[SplitResult, str, int | None]:
    """`urlsplit(url)`, its host and its port, or a `BadURLError` naming the URL for a scheme not in `schemes`, a
    missing host, a port that is not a number from 1 to 65535, or a malformed address."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError as exc:  # an out-of-range or non-numeric port, an unbalanced '[' ...
        raise BadURLError(f"{what} {url!r}: not a valid URL ({exc})") from exc
    if parts.scheme not in schemes:
        raise BadURLError(f"{what} {url!r}: scheme {parts.scheme!r} is not allowed (use {' or '.join(schemes)})")
    if not host:
        raise BadURLError(f"{what} {url!r}: no host")
    if port == 0:
        raise BadURLError(f"{what} {url!r}: port 0 is not a valid port")
    return parts, host, port
