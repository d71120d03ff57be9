"""The address policy is one table of IANA's special-purpose registries, the same on every Python version, and a
malformed URL is one error naming it. No test touches the network: names are resolved by a patched resolver."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest

from tools.addresses import BadURLError, is_public_address, refusal, split_url
from tools.image_input import check_url, load_image
from tools.image_store import ImageInputError, ImageStore

GAPS = [
    "192.0.0.8",
    "192.0.0.9",
    "192.0.0.100",
    "192.0.0.255",  # all of 192.0.0.0/24 (3.11 passes .8 and .100)
    "192.88.99.1",  # the deprecated 6to4 relay anycast
    "64:ff9b:1::7f00:1",
    "64:ff9b:1::a00:1",
    "64:ff9b:1::808:808",  # local-use NAT64, whatever it carries
    "3fff::1",
    "3fff:fff::1",  # IPv6 documentation (2024)
    "5f00::1",  # SRv6 SIDs
    "100::1",
    "100:0:0:1::1",
    "2001:2::1",
    "2001:10::1",
    "2001:20::1",  # discard, dummy, benchmarking, ORCHIDs
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
    "4000::1",
    "::2:3:4",  # outside IPv6 global unicast
    "64:ff9b::c000:8",
    "2002:c000:8::1",
    "::ffff:192.0.0.8",  # NAT64, 6to4 and mapped forms of 192.0.0.8
    "64:ff9b::a00:1",
    "2002:a00:1::1",
    "::ffff:10.0.0.1",  # ... and of 10.0.0.1
]
PUBLIC = [
    "8.8.8.8",
    "192.0.1.1",
    "192.1.0.1",
    "2001:4860:4860::8888",
    "2a00:1450::1",
    "64:ff9b::808:808",
    "2002:808:808::1",
    "::ffff:8.8.8.8",
]


def _no_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("no lookup expected")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.mark.parametrize("addr", GAPS)
def test_every_special_purpose_block_is_refused(addr: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_dns(monkeypatch)
    assert not is_public_address(ipaddress.ip_address(addr)), refusal(ipaddress.ip_address(addr))
    host = f"[{addr}]" if ":" in addr else addr
    with pytest.raises(ImageInputError, match="non-public"):
        check_url(f"http://{host}/a.png")


@pytest.mark.parametrize("addr", PUBLIC)
def test_public_addresses_pass(addr: str) -> None:
    assert is_public_address(ipaddress.ip_address(addr))


@pytest.mark.parametrize("addr", ["192.0.0.8", "3fff::1", "5f00::1", "64:ff9b:1::7f00:1", "10.0.0.1", "::1"])
def test_the_verdict_does_not_come_from_the_standard_library(addr: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Python versions disagree on `is_global` / `is_private`; the table must decide alone.
    for cls in (ipaddress.IPv4Address, ipaddress.IPv6Address):
        monkeypatch.setattr(cls, "is_global", property(lambda self: True))
        monkeypatch.setattr(cls, "is_private", property(lambda self: False))
    assert not is_public_address(ipaddress.ip_address(addr))


def test_a_name_that_resolves_into_a_gap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        socket,
        "getaddrinfo",
        lambda *a, **k: [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("64:ff9b:1::7f00:1", 0, 0, 0))],
    )
    with pytest.raises(ImageInputError, match=r"'http://nat64\.test/a\.png'.*64:ff9b:1::7f00:1"):
        check_url("http://nat64.test/a.png")


BAD_URLS = [
    "http://example.com:99999/a.png",
    "http://example.com:-1/a.png",
    "http://example.com:abc/a.png",
    "http://example.com:0/a.png",
    "http://[::1/a.png",
    "http://[zz::1]/a.png",
    "http:///a.png",
    "gopher://example.com/a.png",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_malformed_url_is_one_error_naming_it(url: str, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    _no_dns(monkeypatch)
    with pytest.raises(ImageInputError) as info:
        check_url(url)
    assert repr(url) in str(info.value)
    with pytest.raises(ImageInputError, match="image URL"):
        asyncio.run(load_image(url, ImageStore(tmp_path / "store")))


def test_a_bad_hub_endpoint_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.hub import hub_access

    _no_dns(monkeypatch)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example:99999")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    with pytest.raises(BadURLError, match="HF_ENDPOINT 'https://hub.example:99999'"):
        hub_access("nobody/not-a-cached-model-xyz", "config.json")


def test_split_url_gives_host_and_port() -> None:
    _, host, port = split_url("https://[2001:db8::1]:8443/x")
    assert (host, port) == ("2001:db8::1", 8443)
