"""Bring an image named by a sample (a local path or an http(s) URL) into the image store.

Image references come from untrusted dataset files, so they are checked before anything is read:
only `http`/`https` URLs to public addresses are fetched (no `file:`, no loopback, private, link-local,
shared (CGNAT), reserved or other special-purpose addresses, which would let a dataset probe the machine's network:
`tools.addresses` holds the one table, IANA's registries, the same on every Python version), a malformed URL or
port is one error naming the URL,
redirects are followed by hand and re-checked, the body is size-capped, the whole fetch has one deadline, and a
relative path may not escape the dataset folder.

DNS rebinding: a host name is resolved exactly once per request; every address it resolves to must be public,
and the connection goes to that checked address (the URL's host name is kept in the `Host` header and as the TLS
server name, so virtual hosts and certificate checks work as usual). The peer address of the open connection is
checked again before any byte of the body is read. Proxies from the environment are not used: a proxy would make
the connection to an address we never checked.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import ssl
from pathlib import Path
from urllib.parse import urljoin, urlunsplit

import httpx

from tools.addresses import BadURLError, IPAddress, refusal, split_url
from tools.addresses import is_public_address as is_public_address  # re-exported: the check's public name
from tools.image_store import DEFAULT_MAX_BYTES, ImageInputError, ImageStore, StoredImage

MAX_REDIRECTS = 3
DEFAULT_DEADLINE_S = 60.0  # the whole download, redirects included; `timeout` still bounds each read


def resolve_host(host: str) -> list[IPAddress]:
    """Every address of `host` (a name or a literal), resolved once, in the resolver's order."""
    try:
        return [ipaddress.ip_address(host.strip("[]").split("%")[0])]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ImageInputError(f"image URL host {host!r}: cannot be resolved ({exc})") from exc
    out: list[IPAddress] = []
    for info in infos:
        addr = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if addr not in out:
            out.append(addr)
    if not out:
        raise ImageInputError(f"image URL host {host!r}: resolves to no address")
    return out


def check_url(url: str, *, allow_private: bool = False) -> list[IPAddress]:
    """Refuse URLs that are not http(s) or whose host has any non-public address; returns the checked addresses.

    The caller must connect to one of the returned addresses, never resolve the name again.
    """
    try:
        _, host, _ = split_url(url, what="image URL")
    except BadURLError as exc:
        raise ImageInputError(str(exc)) from exc
    addresses = resolve_host(host)
    if not allow_private:
        bad = [f"{a}: {refusal(a)}" for a in addresses if not is_public_address(a)]
        if bad:
            raise ImageInputError(
                f"image URL {url!r}: host resolves to a non-public address ({'; '.join(bad)}); loopback, private, "
                "shared, link-local, reserved and every other special-purpose address (IANA's registries) are refused"
            )
    return addresses


def _pinned(url: str, addr: IPAddress) -> tuple[str, dict[str, str], dict[str, str]]:
    """The request for `url` sent to `addr`: the URL with the address as host, the Host header, the TLS name."""
    parsed, host, port = split_url(url)  # checked by `check_url` already
    literal = f"[{addr}]" if addr.version == 6 else str(addr)
    netloc = literal + (f":{port}" if port else "")
    host_header = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    target = urlunsplit((parsed.scheme, netloc, parsed.path or "/", parsed.query, ""))
    return target, {"Host": host_header}, {"sni_hostname": host}


def _peer(resp: httpx.Response) -> IPAddress | None:
    stream = resp.extensions.get("network_stream")
    info = stream.get_extra_info("server_addr") if stream is not None else None
    if not info:
        return None
    return ipaddress.ip_address(str(info[0]).split("%")[0])


async def _get(
    client: httpx.AsyncClient, url: str, current: str, addresses: list[IPAddress], max_bytes: int
) -> tuple[bytes | None, str | None]:
    """One GET of `current` on the first checked address that accepts a connection: (body, None), or
    (None, next URL) for a redirect."""
    last: httpx.ConnectError | None = None
    for addr in addresses:  # every one was checked; trying the next keeps dual-stack hosts working
        target, headers, extensions = _pinned(current, addr)
        try:
            async with client.stream("GET", target, headers=headers, extensions=extensions) as resp:
                peer = _peer(resp)
                if peer is None or peer not in addresses:
                    raise ImageInputError(f"image URL {url!r}: connected to {peer}, not to the checked address")
                if resp.is_redirect:
                    return None, urljoin(current, resp.headers.get("location", ""))
                if resp.status_code != 200:
                    raise ImageInputError(f"image URL {url!r}: HTTP {resp.status_code}")
                declared = resp.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    raise ImageInputError(f"image URL {url!r}: body of {declared} bytes is over {max_bytes} bytes")
                chunks: list[bytes] = []
                size = 0
                async for chunk in resp.aiter_bytes():  # decoded bytes: a gzip bomb counts at full size
                    size += len(chunk)
                    if size > max_bytes:
                        raise ImageInputError(f"image URL {url!r}: body over {max_bytes} bytes")
                    chunks.append(chunk)
                return b"".join(chunks), None
        except httpx.ConnectError as exc:
            last = exc
    assert last is not None
    raise last


async def _fetch(
    url: str, *, allow_private: bool, timeout: float, max_bytes: int, verify: ssl.SSLContext | None
) -> bytes:
    current = url
    # trust_env=False: no proxy and no .netrc from the environment (see the module docstring). The certificate
    # store still honours SSL_CERT_FILE / SSL_CERT_DIR, as it would with the environment trusted.
    tls = verify if verify is not None else httpx.create_ssl_context(trust_env=True)
    async with httpx.AsyncClient(follow_redirects=False, timeout=timeout, trust_env=False, verify=tls) as client:
        for _ in range(MAX_REDIRECTS + 1):
            addresses = await asyncio.to_thread(check_url, current, allow_private=allow_private)
            body, redirect = await _get(client, url, current, addresses, max_bytes)
            if body is not None:
                return body
            assert redirect is not None
            current = redirect
    raise ImageInputError(f"image URL {url!r}: more than {MAX_REDIRECTS} redirects")


async def fetch_url(
    url: str,
    *,
    allow_private: bool = False,
    timeout: float = 20.0,
    deadline: float = DEFAULT_DEADLINE_S,
    max_bytes: int = DEFAULT_MAX_BYTES,
    verify: ssl.SSLContext | None = None,
) -> bytes:
    """Download an image URL with the checks above, following at most MAX_REDIRECTS re-checked redirects.

    `timeout` bounds each connect and read; `deadline` bounds the whole download, so a server that trickles
    one byte just inside the read timeout cannot hold a sample for ever. `verify`: the TLS context that checks
    server certificates (default: the system's, or SSL_CERT_FILE / SSL_CERT_DIR); the certificate is checked
    against the URL's host name even though the connection goes to a pinned address.
    """
    try:
        async with asyncio.timeout(deadline):
            return await _fetch(url, allow_private=allow_private, timeout=timeout, max_bytes=max_bytes, verify=verify)
    except TimeoutError as exc:
        raise ImageInputError(f"image URL {url!r}: not downloaded within the {deadline:g} s deadline") from exc
    except httpx.HTTPError as exc:
        raise ImageInputError(f"image URL {url!r}: {type(exc).__name__}: {exc}") from exc


def resolve_path(ref: str, base_dir: str | os.PathLike[str] | None) -> Path:
    """Resolve a local image path; with a `base_dir`, relative paths resolve inside it and no path may leave it."""
    p = Path(ref).expanduser()
    if base_dir is None:
        return p
    base = Path(base_dir).resolve()
    full = (base / p).resolve() if not p.is_absolute() else p.resolve()
    # An absolute path in a dataset file escapes it just as `../` does (the evaluation loaders refuse both too).
    if base not in full.parents:
        raise ImageInputError(f"image path {ref!r}: escapes the dataset folder {str(base)!r}")
    return full


async def load_image(
    ref: str,
    store: ImageStore,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    allow_private_urls: bool = False,
) -> StoredImage:
    """Put the image named by `ref` (path, http(s) URL, or an id already in the store) into the store."""
    if not isinstance(ref, str) or not ref.strip():
        raise ImageInputError(f"image reference {ref!r}: empty")
    ref = ref.strip()
    if len(ref) == 64 and all(c in "0123456789abcdef" for c in ref) and store.has(ref):
        im = await asyncio.to_thread(store.open, ref)
        return StoredImage(id=ref, path=str(store.path_for(ref)), width=im.width, height=im.height)
    if "://" in ref or ref.startswith(("data:", "file:")):
        data = await fetch_url(ref, allow_private=allow_private_urls)
        return await asyncio.to_thread(store.put_bytes, data, name=ref)
    path = resolve_path(ref, base_dir)
    return await asyncio.to_thread(store.put_file, path)
