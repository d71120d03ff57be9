"""Image URLs and sizes under attack, on loopback only.

DNS rebinding is simulated by a resolver that answers differently on each lookup; "public" and "internal" are
two loopback addresses (127.0.0.2 plays a public server, 127.0.0.1 the internal one) with the address policy
patched to match, so no packet leaves the machine.
"""

from __future__ import annotations

import http.server
import io
import ipaddress
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

import tools.image_input as image_input
from runner.batch_input import read_jsonl
from tools.image_input import check_url, fetch_url, is_public_address
from tools.image_store import ImageInputError, ImageStore


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), "blue").save(buf, format="PNG")
    return buf.getvalue()


PNG = _png()


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        server: _Server = self.server  # type: ignore[assignment]
        server.requests.append(self.path)
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", self.path.split("to=", 1)[1])
            self.end_headers()
        elif self.path == "/trickle":
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.end_headers()
            try:
                for _ in range(200):  # one byte every 50 ms: each read is quick, the whole never ends
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass
        elif self.path == "/huge-declared":
            self.send_response(200)
            self.send_header("Content-Length", str(3 * 1024**3))
            self.end_headers()
        elif self.path == "/huge-chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for _ in range(64):
                    self.wfile.write(b"4000\r\n" + b"x" * 0x4000 + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass
        else:
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(PNG)))
            self.end_headers()
            self.wfile.write(PNG)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    requests: list[str]


def _serve(host: str) -> Iterator[_Server]:
    server = _Server((host, 0), _Handler)
    server.requests = []
    # A short poll: `shutdown()` waits for the loop to look (every 0.5 s by default, twice a test with two servers).
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def internal() -> Iterator[_Server]:
    """The machine's internal service that an attacker wants to reach."""
    yield from _serve("127.0.0.1")


@pytest.fixture
def public() -> Iterator[_Server]:
    """A server standing in for a public host."""
    yield from _serve("127.0.0.2")


@pytest.fixture
def rebinding(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """A resolver: `rebind.test` answers 127.0.0.2 ("public") once, then 127.0.0.1 (internal) for ever;
    `inside.test` always answers 127.0.0.1. Only 127.0.0.2 counts as public here."""
    real = socket.getaddrinfo
    answers: dict[str, list[str]] = {"rebind.test": ["127.0.0.2"], "inside.test": []}
    lookups: dict[str, list[str]] = {"rebind.test": [], "inside.test": []}

    def fake(host: str, port: object, *args: object, **kwargs: object) -> list:
        if host in answers:
            addr = answers[host].pop(0) if answers[host] else "127.0.0.1"
            lookups[host].append(addr)
            return real(addr, port, *args, **kwargs)  # type: ignore[arg-type]
        return real(host, port, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    monkeypatch.setattr(image_input, "is_public_address", lambda a: str(a) == "127.0.0.2")
    return lookups


# -- the address policy --------------------------------------------------------------------------------------

REFUSED = [
    "100.64.0.1",
    "100.100.100.200",  # shared address space (CGNAT), incl. a cloud metadata address
    "192.0.0.1",
    "198.18.0.1",
    "0.0.0.0",
    "127.0.0.1",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.0.1",
    "169.254.169.254",
    "240.0.0.1",
    "255.255.255.255",
    "224.0.0.1",
    "192.0.2.1",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "fec0::1",  # site-local IPv6
    "2002:7f00:1::1",
    "2002:a9fe:a9fe::1",  # 6to4 of 127.0.0.1 and 169.254.169.254
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::127.0.0.1",
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "2001:db8::1",
    "ff02::1",
    "2001::1",
]
ALLOWED = ["8.8.8.8", "1.1.1.1", "2001:4860:4860::8888", "2002:808:808::1", "::ffff:8.8.8.8", "64:ff9b::808:808"]


@pytest.mark.parametrize("addr", REFUSED)
def test_special_purpose_addresses_are_refused(addr: str) -> None:
    assert not is_public_address(ipaddress.ip_address(addr))
    host = f"[{addr}]" if ":" in addr else addr
    with pytest.raises(ImageInputError, match="non-public"):
        check_url(f"http://{host}/a.png")


@pytest.mark.parametrize("addr", ALLOWED)
def test_global_addresses_pass(addr: str) -> None:
    assert is_public_address(ipaddress.ip_address(addr))


def test_a_name_with_any_internal_address_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        socket,
        "getaddrinfo",
        lambda *a, **k: [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("8.8.8.8", 0)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("100.100.100.200", 0)),
        ],
    )
    with pytest.raises(ImageInputError, match="100.100.100.200"):
        check_url("http://mixed.test/a.png")


# -- DNS rebinding: the checked address is the connected address ---------------------------------------------


async def test_rebinding_cannot_reach_the_internal_server(
    rebinding: dict[str, list[str]], public: _Server, internal: _Server
) -> None:
    data = await fetch_url(f"http://rebind.test:{public.server_port}/a.png", timeout=5, deadline=10)
    assert data == PNG and public.requests == ["/a.png"]
    assert rebinding["rebind.test"] == ["127.0.0.2"]  # resolved once: the connection did not look the name up again
    # Same port on the internal address: a second lookup would have reached it.
    assert internal.requests == []


async def test_the_host_header_keeps_the_name(
    rebinding: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch, public: _Server
) -> None:
    seen: list[str] = []
    original = _Handler.do_GET

    def spy(self: _Handler) -> None:
        seen.append(self.headers["Host"])
        original(self)

    monkeypatch.setattr(_Handler, "do_GET", spy)
    await fetch_url(f"http://rebind.test:{public.server_port}/a.png", timeout=5, deadline=10)
    assert seen == [f"rebind.test:{public.server_port}"]


async def test_second_lookup_after_the_check_is_never_used(rebinding: dict[str, list[str]], internal: _Server) -> None:
    # The name checks as public (127.0.0.2, where nothing listens on this port) and then rebinds to the
    # internal server: the fetch must fail on the checked address, not succeed on the internal one.
    with pytest.raises(ImageInputError):
        await fetch_url(f"http://rebind.test:{internal.server_port}/secret", timeout=5, deadline=10)
    assert internal.requests == []


async def test_redirect_to_an_internal_name_is_refused(
    rebinding: dict[str, list[str]], public: _Server, internal: _Server
) -> None:
    target = f"http://inside.test:{internal.server_port}/secret"
    with pytest.raises(ImageInputError, match="non-public"):
        await fetch_url(f"http://rebind.test:{public.server_port}/redirect?to={target}", timeout=5, deadline=10)
    assert internal.requests == []


async def test_a_connection_to_another_address_is_refused(
    rebinding: dict[str, list[str]], public: _Server, internal: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A transport that connects somewhere other than the checked address (here forced) is caught by the
    # peer-address check before the body is read.
    real = image_input._pinned
    monkeypatch.setattr(image_input, "_pinned", lambda url, addr: real(url, ipaddress.ip_address("127.0.0.1")))
    with pytest.raises(ImageInputError, match="not to the checked address"):
        await fetch_url(f"http://rebind.test:{internal.server_port}/secret", timeout=5, deadline=10)


async def test_every_checked_address_is_tried_in_turn(monkeypatch: pytest.MonkeyPatch, public: _Server) -> None:
    # Dual-stack hosts: the first address refuses the connection, the second (also checked) serves.
    real = socket.getaddrinfo
    answer = [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.3", 0)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.2", 0)),
    ]
    monkeypatch.setattr(socket, "getaddrinfo", lambda h, *a, **k: answer if h == "two.test" else real(h, *a, **k))
    monkeypatch.setattr(image_input, "is_public_address", lambda a: str(a) in ("127.0.0.2", "127.0.0.3"))
    assert await fetch_url(f"http://two.test:{public.server_port}/a.png", timeout=5, deadline=10) == PNG


# -- sizes and deadlines --------------------------------------------------------------------------------------


async def test_a_trickling_server_hits_the_overall_deadline(internal: _Server) -> None:
    with pytest.raises(ImageInputError, match="deadline"):
        await fetch_url(f"http://127.0.0.1:{internal.server_port}/trickle", allow_private=True, timeout=5, deadline=0.5)


async def test_a_declared_huge_body_is_refused_before_reading(internal: _Server) -> None:
    with pytest.raises(ImageInputError, match="over"):
        await fetch_url(f"http://127.0.0.1:{internal.server_port}/huge-declared", allow_private=True, timeout=5)


async def test_an_undeclared_huge_body_is_cut_at_the_cap(internal: _Server) -> None:
    with pytest.raises(ImageInputError, match="over 65536 bytes"):
        await fetch_url(
            f"http://127.0.0.1:{internal.server_port}/huge-chunked", allow_private=True, timeout=5, max_bytes=65536
        )


def test_a_huge_image_file_is_refused_without_reading_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "huge.png"
    with big.open("wb") as fh:
        fh.truncate(3 * 1024**3)  # a sparse 3 GB file: no disk used, but reading it would take 3 GB of memory
    reads: list[int] = []
    real_open = Path.open

    def spy_open(self: Path, *args: Any, **kwargs: Any) -> Any:
        fh: Any = real_open(self, *args, **kwargs)
        if self == big:
            real_read = fh.read

            def read(n: int = -1) -> bytes:
                reads.append(n)
                return bytes(real_read(n))

            fh.read = read
        return fh

    monkeypatch.setattr(Path, "open", spy_open)
    with pytest.raises(ImageInputError, match="huge.png.*3221225472 bytes is over"):
        ImageStore(tmp_path / "store").put_file(big)
    assert reads == []


def test_a_huge_input_line_is_a_failed_record_read_in_bounded_memory(tmp_path: Path) -> None:
    import tracemalloc

    path = tmp_path / "in.jsonl"
    with path.open("wb") as fh:
        fh.write(json.dumps({"id": "a", "text": "ok"}).encode() + b"\n")
        fh.write(b'{"id": "b", "text": "' + b"x" * (64 * 1024 * 1024) + b'"}\n')
        fh.write(json.dumps({"id": "c", "text": "ok"}).encode() + b"\n")
    tracemalloc.start()
    try:
        items = list(read_jsonl(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(i.id, i.error is None) for i in items] == [("a", True), ("line-2", False), ("c", True)]
    assert "over" in (items[1].error or "")
    assert peak < 16 * 1024 * 1024  # the 64 MB line never sat in memory whole


# -- HTTPS to a pinned address: SNI and certificate checks still use the host name ----------------------------


def _certificate(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for `name` (made with `cryptography`, no network)."""
    import datetime

    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


async def test_https_keeps_the_host_name_for_sni_and_the_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ssl

    cert, key = _certificate(tmp_path, "images.test")
    server = _Server(("127.0.0.2", 0), _Handler)
    server.requests = []
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    names: list[str | None] = []
    tls.sni_callback = lambda sock, name, ctx: names.append(name)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    real = socket.getaddrinfo
    lookups: list[str] = []

    def resolver(host: str, *args: Any, **kwargs: Any) -> Any:
        if host.endswith(".test"):
            lookups.append(host)
            return real("127.0.0.2", *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    monkeypatch.setattr(image_input, "is_public_address", lambda a: str(a) == "127.0.0.2")
    trust = ssl.create_default_context(cafile=str(cert))
    try:
        data = await fetch_url(f"https://images.test:{server.server_port}/a.png", timeout=5, deadline=10, verify=trust)
        assert data == PNG and names == ["images.test"] and lookups == ["images.test"]
        # The certificate is still checked against the URL's name, not the pinned address.
        with pytest.raises(ImageInputError, match="CERTIFICATE_VERIFY_FAILED|certificate"):
            await fetch_url(f"https://other.test:{server.server_port}/a.png", timeout=5, deadline=10, verify=trust)
    finally:
        server.shutdown()
        server.server_close()
