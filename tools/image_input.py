"""Bring an image named by a sample (a local path or an http(s) URL) into the image store.

Image references come from untrusted dataset files, so they are checked before anything is read:
only `http`/`https` URLs to public addresses are fetched (no `file:`, no loopback, private, link-local or
reserved addresses, which would let a dataset probe the machine's network), redirects are followed by hand
and re-checked, the body is size-capped, and a relative path may not escape the dataset folder.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from pathlib import Path
from urllib.parse import urljoin, urlparse

import httpx

from tools.image_store import DEFAULT_MAX_BYTES, ImageInputError, ImageStore, StoredImage

MAX_REDIRECTS = 3


def _is_public(host: str) -> bool:
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror as exc:
        raise ImageInputError(f"image URL host {host!r}: cannot be resolved ({exc})") from exc
    for info in infos:
        addr = ipaddress.ip_address(info[4][0].split("%")[0])
        if (
            addr.is_private
            or addr.is_loopback
            or addr.is_link_local
            or addr.is_reserved
            or addr.is_multicast
            or addr.is_unspecified
        ):
            return False
    return True


def check_url(url: str, *, allow_private: bool = False) -> None:
    """Refuse URLs that are not http(s) or that point at loopback or private addresses."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https"):
        raise ImageInputError(f"image URL {url!r}: scheme {parsed.scheme!r} is not allowed (use http or https)")
    if not parsed.hostname:
        raise ImageInputError(f"image URL {url!r}: no host")
    if not allow_private and not _is_public(parsed.hostname):
        raise ImageInputError(f"image URL {url!r}: points at a loopback, private or reserved address")


async def fetch_url(url: str, *, allow_private: bool = False, timeout: float = 20.0) -> bytes:
    """Download an image URL with the checks above, following at most MAX_REDIRECTS re-checked redirects."""
    current = url
    async with httpx.AsyncClient(follow_redirects=False, timeout=timeout) as client:
        for _ in range(MAX_REDIRECTS + 1):
            await asyncio.to_thread(check_url, current, allow_private=allow_private)
            async with client.stream("GET", current) as resp:
                if resp.is_redirect:
                    current = urljoin(current, resp.headers.get("location", ""))
                    continue
                if resp.status_code != 200:
                    raise ImageInputError(f"image URL {url!r}: HTTP {resp.status_code}")
                chunks: list[bytes] = []
                size = 0
                async for chunk in resp.aiter_bytes():
                    size += len(chunk)
                    if size > DEFAULT_MAX_BYTES:
                        raise ImageInputError(f"image URL {url!r}: body over {DEFAULT_MAX_BYTES} bytes")
                    chunks.append(chunk)
                return b"".join(chunks)
    raise ImageInputError(f"image URL {url!r}: more than {MAX_REDIRECTS} redirects")


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
