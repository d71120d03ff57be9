"""An uncached Hugging Face model fails at once with the reason, instead of a minute of hub retries."""

from __future__ import annotations

import socket

import pytest

from tools import hub
from tools.hub import HubUnavailableError, hub_access


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf"))
    hub._probe.cache_clear()
    yield tmp_path / "hf"
    hub._probe.cache_clear()


def test_offline_setting_is_named(empty_cache, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubUnavailableError, match="HF_HUB_OFFLINE is set"):
        hub_access("CompVis/stable-diffusion-v1-4", "model_index.json")


def test_unreachable_hub_is_named(empty_cache, monkeypatch) -> None:
    # A loopback port with nothing listening: the connection is refused at once.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(HubUnavailableError, match=r"cannot be reached \(ConnectionRefusedError"):
        hub_access("CompVis/stable-diffusion-v1-4", "model_index.json")


def test_cached_file_needs_no_network(empty_cache, monkeypatch) -> None:
    snap = empty_cache / "models--org--tiny" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "model_index.json").write_text("{}")
    (empty_cache / "models--org--tiny" / "refs").mkdir()
    (empty_cache / "models--org--tiny" / "refs" / "main").write_text("abc")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_access("org/tiny", "model_index.json") == "cached"


def test_refine_with_an_uncached_default_generator_fails_fast(empty_cache, monkeypatch, tmp_path, capsys) -> None:
    from unveil.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    script = tmp_path / "s.json"
    script.write_text('{"refiner": ["keep"]}')
    rc = main(
        [
            "refine",
            "a cat",
            "--refiner",
            f"scripted:{script}",
            "--cache",
            "off",
            "--image-store",
            str(tmp_path / "store"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "CompVis/stable-diffusion-v1-4" in err and "HF_HUB_OFFLINE is set" in err


def test_generate_offline_with_the_default_generator_fails_at_once_before_its_folder(
    empty_cache, monkeypatch, tmp_path, capsys
) -> None:
    from unveil.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    script = tmp_path / "s.json"
    script.write_text("{}")
    out = tmp_path / "ds"
    rc = main(["generate", "--category", "drugs", "--n", "1", "--out", str(out), "--model", f"scripted:{script}"])
    err = capsys.readouterr().err
    assert rc == 1 and "stable-diffusion-v1-5" in err and "HF_HUB_OFFLINE is set" in err
    assert "--generator diffusers:/path/to/folder" in err
    assert not out.exists()  # no empty output folder left behind


def test_a_resolver_that_never_answers_is_a_reason_not_a_wait(monkeypatch) -> None:
    # Offline machines can leave the name lookup hanging for most of a minute; the probe bounds it.
    import threading

    hub._probe.cache_clear()
    never = threading.Event()

    def hang(*_args: object, **_kw: object) -> list[object]:
        never.wait(60)
        return []

    monkeypatch.setattr(hub, "PROBE_TIMEOUT_S", 0.05)
    monkeypatch.setattr(socket, "getaddrinfo", hang)
    try:
        reason = hub._probe("hub.invalid", 443)
    finally:
        never.set()
        hub._probe.cache_clear()
    assert reason is not None and "did not resolve" in reason


def test_a_ray_cluster_unveil_starts_sends_no_usage_stats(monkeypatch) -> None:
    import os

    ray = pytest.importorskip("ray")
    from runner.ray import cluster

    seen: dict[str, str | None] = {}
    monkeypatch.delenv("RAY_USAGE_STATS_ENABLED", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(value=os.environ.get("RAY_USAGE_STATS_ENABLED")))
    assert cluster.connect(None) is True
    assert seen["value"] == "0"
