"""The warning of a structured-method fallback quotes the server's own message whole, on one line, through a real
loopback server that refuses `response_format: json_schema` with a multi-line validation dump."""

from __future__ import annotations

import logging

import pytest
from langchain_core.messages import HumanMessage
from pydantic import BaseModel

from agents.faults import server_message
from agents.gateway import Gateway, GatewaySettings
from tests.faultserver import FaultServer


class Probe(BaseModel):
    """A one-field answer."""

    ok: bool


async def test_the_fallback_warning_quotes_the_servers_message_whole(caplog: pytest.LogCaptureFixture) -> None:
    gateway = Gateway(GatewaySettings(cache_path=None, max_retries=0, max_repairs=0))
    with FaultServer({"Probe": {"ok": True}}, unsupported=("json_schema",)) as server:
        with caplog.at_level(logging.WARNING):
            result = await gateway.structured(
                role="probe", spec=server.spec(), schema=Probe, messages=[HumanMessage("x")]
            )
    assert result.value.ok
    (warning,) = [r.getMessage() for r in caplog.records if "does not support structured method" in r.getMessage()]
    assert "\n" not in warning
    # the whole validation error, its last quoted value and closing brace included (it was cut at 160 characters)
    assert "HTTP 500: 1 validation error: {'type': 'literal_error'" in warning
    assert """'msg': "Input should be 'text' or 'json_object'", 'input': 'json_schema'}); using""" in warning


def test_a_long_message_is_cut_at_a_word_and_says_so() -> None:
    class Refused(Exception):
        body = {"message": "word " * 200}
        status_code = 400

    text = server_message(Refused("x"))
    assert text.startswith("HTTP 400: word word") and text.endswith("characters more)") and "wor …" not in text
