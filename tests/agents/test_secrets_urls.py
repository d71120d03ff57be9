"""Credentials in base URLs and default API keys: a password in `@http://user:pw@host/v1` is never written
(outputs, cache, logs, errors), and a provider's default key (`OPENAI_API_KEY`) goes only to that provider's own
endpoint; a custom server gets `UNVEIL_OPENAI_API_KEY` or nothing. Checked on the wire with the loopback fault
server, which records every Authorization header it receives."""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from agents.content import build_messages
from agents.gateway import Gateway, GatewaySettings, ModelCallError
from agents.providers.langchain_api import custom_endpoint_key
from agents.spec import ModelSpec, redact_spec
from tests.faultserver import FaultServer, UnveilAnswers
from tools.redact import redact_secrets, redact_url

ROOT = Path(__file__).resolve().parents[2]


class VanillaVerdict(BaseModel):
    toxic: bool
    reason: str = ""


def test_url_credentials_are_redacted_in_every_written_form() -> None:
    spec = ModelSpec.parse("openai:m@http://alice:s3cret-pw@example.org:8000/v1")
    assert spec.base_url == "http://alice:s3cret-pw@example.org:8000/v1"  # the client gets the real URL
    for shown in (str(spec), spec.backend, redact_spec("openai:m@http://alice:s3cret-pw@example.org:8000/v1")):
        assert "s3cret-pw" not in shown and "alice" not in shown and "example.org:8000/v1" in shown
    assert redact_url("https://token123@host/v1") == "https://***@host/v1"
    assert redact_url("http://host/v1") == "http://host/v1"
    # A key in the query string is a credential too (it was written to the settings sidecar in clear).
    for url in (
        "http://host/v1?api-key=s3cret-pw&api-version=2",
        "http://host/v1?key=s3cret-pw",
        "http://h/v?sig=s3cret-pw",
    ):
        shown = redact_url(url)
        assert "s3cret-pw" not in shown and "***" in shown, shown
        assert "s3cret-pw" not in str(ModelSpec.parse(f"openai:m@{url}"))
    assert redact_url("http://host/v1?api-version=2") == "http://host/v1?api-version=2"
    assert "s3cret" not in redact_secrets("POST http://bob:s3cret@10.0.0.1/v1 failed")


def test_redaction_keeps_the_missing_key_message_and_still_hides_assigned_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphs.context import ContextError, check_model_spec

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ContextError) as err:
        check_model_spec("model", "openai:gpt-4.1")
    message = str(err.value)
    assert "set OPENAI_API_KEY in the environment that runs it (the shell you run `unveil` from" in message
    assert redact_secrets(message) == message  # the words after the variable's name are not a secret
    for written in ("api_key=abc123xyz", 'api-key: "abc123xyz"', '{"api_key": "abc123xyz"}', "API_KEY = abc123xyz"):
        assert "abc123xyz" not in redact_secrets(written), written


def test_default_keys_go_only_to_the_providers_own_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-default-key-0123456789")
    assert custom_endpoint_key(ModelSpec.parse("openai:gpt-4.1")) is None  # the client reads OPENAI_API_KEY itself
    assert custom_endpoint_key(ModelSpec.parse("openai:gpt-4.1@https://api.openai.com/v1")) is None
    assert custom_endpoint_key(ModelSpec.parse("openai:m@http://127.0.0.1:8000/v1")) == "not-needed"
    assert custom_endpoint_key(ModelSpec.parse("anthropic:c@https://proxy.example/v1")) == "not-needed"
    monkeypatch.setenv("UNVEIL_OPENAI_API_KEY", "vllm-token-0123456789")
    assert custom_endpoint_key(ModelSpec.parse("openai:m@http://127.0.0.1:8000/v1")) == "vllm-token-0123456789"


async def test_a_custom_server_never_receives_openai_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    default_key = f"sk-default-canary-{secrets.token_hex(8)}"
    monkeypatch.setenv("OPENAI_API_KEY", default_key)
    messages = build_messages("You judge pairs.", {"text": "a pair"})
    with FaultServer({"VanillaVerdict": {"toxic": False, "reason": "fine"}}) as server:
        gw = Gateway(GatewaySettings(cache_path=None))
        await gw.structured(role="vanilla_detector", spec=server.spec(), schema=VanillaVerdict, messages=messages)
        assert server.auth == {"Bearer not-needed"}
        # the documented opt-in for a custom server's key
        monkeypatch.setenv("UNVEIL_OPENAI_API_KEY", "vllm-token-opt-in-0123")
        gw = Gateway(GatewaySettings(cache_path=None))
        await gw.structured(role="vanilla_detector", spec=server.spec("m2"), schema=VanillaVerdict, messages=messages)
    assert "Bearer vllm-token-opt-in-0123" in server.auth
    assert not any(default_key in a for a in server.auth)


async def test_errors_name_the_server_without_its_password() -> None:
    messages = build_messages("You judge pairs.", {"text": "a pair UNVEIL-POISON"})
    with FaultServer({"VanillaVerdict": {"toxic": False, "reason": "fine"}}) as server:
        spec = f"openai:fake-model@http://user:pw-canary-{secrets.token_hex(6)}@127.0.0.1:{server.port}/v1"
        gw = Gateway(GatewaySettings(cache_path=None, max_retries=1, backoff_base=0.001))
        with pytest.raises(ModelCallError) as err:
            await gw.structured(role="vanilla_detector", spec=spec, schema=VanillaVerdict, messages=messages)
    assert len(server.bodies) == 2  # the request reached the server through the credentialled URL
    assert "pw-canary" not in str(err.value) and f"127.0.0.1:{server.port}" in str(err.value)


RUN_ENV = {"UNVEIL_MAX_RETRIES": "1", "UNVEIL_BACKOFF_BASE": "0.01", "LANGSMITH_TRACING": "false"}


def _detect_in_a_process(argv: list[str], home: Path) -> tuple[bytes, bytes]:
    """`unveil -v ARGV` as a real process with a user's environment (HOME moved): its stdout and stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNVEIL_")}
    env.update({"HOME": str(home), "PYTHONPATH": str(ROOT), **RUN_ENV})
    proc = subprocess.run(
        [sys.executable, "-m", "unveil.cli", "-v", *argv], cwd=ROOT, env=env, capture_output=True, timeout=240
    )
    return proc.stdout, proc.stderr


def _detect_here(
    argv: list[str], home: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], caplog
) -> tuple[bytes, bytes]:
    """The same run through `unveil.cli.main` in this process, the same environment set by `monkeypatch`: its
    stdout, and its stderr followed by its log lines (pytest's handlers take them here, redaction included)."""
    from unveil.cli import main

    for name in [n for n in os.environ if n.startswith("UNVEIL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(home))
    for name, value in RUN_ENV.items():
        monkeypatch.setenv(name, value)
    caplog.set_level(logging.INFO)  # what -v shows
    main(["-v", *argv])
    out, err = capfd.readouterr()
    return out.encode(), (err + caplog.text).encode()


@pytest.mark.parametrize("where", ["userinfo", "query"])
def test_detect_batch_never_writes_a_url_password(
    tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], caplog
) -> None:
    """A password in the URL's user part, or a key in its query string, reaches no file a run writes (the
    settings sidecar held the query's key in clear). The user part's run is a real `unveil detect` process (its
    captured stdout and stderr scanned too), the query's the same command in this process."""
    password = f"pw-canary-{secrets.token_hex(10)}"
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in [
                {"id": "ok", "image_description": "a kitchen", "text": "baking day"},
                {"id": "fails", "image_description": "a room", "text": "x UNVEIL-POISON"},
            ]
        )
    )
    with FaultServer(UnveilAnswers()) as server:
        spec = (
            f"openai:fake-model@http://user:{password}@127.0.0.1:{server.port}/v1"
            if where == "userinfo"
            else f"openai:fake-model@http://127.0.0.1:{server.port}/v1?api-key={password}"
        )
        argv = ["detect", "--method", "tag", "--l-max", "2", "--input", str(pairs)]
        argv += ["--output", str(tmp_path / "out.jsonl"), "--model", spec, "--no-progress"]
        if where == "userinfo":
            stdout, stderr = _detect_in_a_process(argv, tmp_path / "home")
        else:
            stdout, stderr = _detect_here(argv, tmp_path / "home", monkeypatch, capfd, caplog)
    (tmp_path / "stdout.log").write_bytes(stdout)
    (tmp_path / "stderr.log").write_bytes(stderr)
    records = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()}
    assert set(records) == {"ok", "fails"} and records["fails"]["status"] == "failed", stderr[-2000:]
    # The OpenAI client puts a base URL's query after its own path (`/v1/?api-key=...`), which this server does
    # not serve: with the key in the query every sample fails, and its error names the server without the key.
    assert records["ok"]["status"] == ("ok" if where == "userinfo" else "failed"), stderr[-2000:]
    assert (tmp_path / ".out.jsonl.settings").is_file()
    assert f"127.0.0.1:{server.port}" in records["fails"]["error"]  # the reason still names the server
    assert list((tmp_path / "home").rglob("responses.sqlite"))  # the default cache was written too
    assert b"HTTP Request: POST" in stderr  # the client's log lines, which carry the URL, are among the files scanned
    hits = [str(p) for p in tmp_path.rglob("*") if p.is_file() and password.encode() in p.read_bytes()]
    assert hits == []
