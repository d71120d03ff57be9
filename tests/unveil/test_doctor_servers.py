"""`unveil doctor` on real loopback servers: a slow one is told apart from one that refuses the connection, each
with the error's own text and its own fix, and the `studio` extra (`langgraph dev`) is checked like the others."""

from __future__ import annotations

import sys

import pytest

from tests.faultserver import FaultServer
from tests.unveil.test_ui import free_port
from tests.unveil.test_workflow_cli import doctor


def test_a_slow_server_is_not_called_unreachable(tmp_path, capsys):
    answers = {"Probe": {"ok": True}, "text": "ok"}
    with FaultServer(answers, rate=1.0, kinds=("timeout",), hang_s=5.0) as slow:
        _, checks = doctor(tmp_path, capsys, "--model", slow.spec(), "--timeout", "0.5")
    reach = checks[f"server {slow.spec()}: reachable"]
    assert not reach["ok"]
    assert "no answer within 0.5 s: too slow, not refused" in reach["detail"]
    assert "raise --timeout" in reach["fix"] and "start the server" not in reach["fix"]


def test_a_refused_connection_says_so_with_the_errors_text(tmp_path, capsys):
    port = free_port()
    spec = f"openai:m@http://127.0.0.1:{port}/v1"
    _, checks = doctor(tmp_path, capsys, "--model", spec, "--timeout", "5")
    reach = checks[f"server {spec}: reachable"]
    assert not reach["ok"] and reach["detail"].startswith("connection refused (ConnectionRefusedError: ")
    assert str(port) in reach["detail"] and "start the server" in reach["fix"]


def test_the_studio_extra_is_checked(tmp_path, capsys, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "langgraph_api", None)  # as if `langgraph-cli[inmem]` were not installed
    from tools.extras import missing_modules

    if missing_modules("studio", ("langgraph_cli",)):
        pytest.skip("the studio extra is not installed here")
    _, checks = doctor(tmp_path, capsys)
    studio = checks["extra studio"]
    assert not studio["ok"] and "langgraph_api" in studio["detail"] and "--with studio" in studio["fix"]
