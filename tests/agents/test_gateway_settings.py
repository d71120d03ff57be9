"""The gateway's cache never costs an answer (locked, corrupt, not a database, unwritable: warn once naming the
file, go on), and bad `UNVEIL_*` values are refused up front with an error naming the variable."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from pydantic import BaseModel

from agents.content import build_messages
from agents.gateway import Gateway, GatewaySettings
from agents.limits import BackendLimits, RateLimiter
from tools.env import SettingError


class Verdict(BaseModel):
    toxic: bool
    reason: str = ""


def _msgs(text: str = "a pair") -> list:
    return build_messages("You judge pairs.", {"text": text})


async def _ask(gw: Gateway, spec: str, text: str = "a pair") -> Verdict:
    result = await gw.structured(role="judge", spec=spec, schema=Verdict, messages=_msgs(text))
    assert not result.cache_hit
    return result.value


def _cache_warnings(caplog: pytest.LogCaptureFixture, path: Path) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "unveil.cache" and str(path) in r.getMessage()]


async def test_a_file_that_is_not_a_database_is_skipped_with_one_warning(tmp_path, write_script, caplog) -> None:
    path = tmp_path / "responses.sqlite"
    path.write_bytes(b"this is not an SQLite database, just some bytes " * 100)
    spec = write_script({"judge": [{"toxic": True, "reason": "a"}, {"toxic": False, "reason": "b"}]})
    gw = Gateway(GatewaySettings(cache_path=str(path)))
    with caplog.at_level(logging.WARNING):
        assert (await _ask(gw, spec, "one")).reason == "a"
        assert (await _ask(gw, spec, "two")).reason == "b"
    warnings = _cache_warnings(caplog, path)
    assert len(warnings) == 1 and "going on without it" in warnings[0]


async def test_an_unwritable_cache_folder_is_skipped(tmp_path, write_script, caplog) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    path = blocker / "cache" / "responses.sqlite"  # its parent cannot be created: a file is in the way
    spec = write_script({"judge": [{"toxic": True, "reason": "paid"}]})
    with caplog.at_level(logging.WARNING):
        value = await _ask(Gateway(GatewaySettings(cache_path=str(path))), spec)
    assert value.reason == "paid" and len(_cache_warnings(caplog, path)) == 1


async def test_a_locked_cache_does_not_throw_the_paid_answer_away(tmp_path, write_script, caplog, monkeypatch) -> None:
    import agents.cache

    monkeypatch.setattr(agents.cache, "LOCK_TIMEOUT_S", 0.05)
    path = tmp_path / "responses.sqlite"
    spec = write_script({"judge": [{"toxic": True, "reason": "paid"}, {"toxic": True, "reason": "again"}]})
    gw = Gateway(GatewaySettings(cache_path=str(path)))
    await _ask(gw, spec, "warm up")  # the database exists and is open
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    try:
        with caplog.at_level(logging.WARNING):
            value = await _ask(gw, spec, "while locked")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert value.reason == "again"
    assert any("cannot be" in w for w in _cache_warnings(caplog, path))


async def test_a_corrupt_entry_is_a_miss_and_is_overwritten(tmp_path, write_script, caplog) -> None:
    path = tmp_path / "responses.sqlite"
    spec = write_script({"judge": [{"toxic": True, "reason": "first"}, {"toxic": False, "reason": "fresh"}]})
    gw = Gateway(GatewaySettings(cache_path=str(path)))
    await _ask(gw, spec)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute('UPDATE responses SET value = \'{"parsed": {"toxic": tr\'')  # a torn row
    db.close()
    with caplog.at_level(logging.WARNING):
        value = await _ask(gw, spec)  # a retry of the same call: not failed forever
    assert value.reason == "fresh" and any("corrupt" in w for w in _cache_warnings(caplog, path))
    replay = await Gateway(GatewaySettings(cache_path=str(path))).structured(
        role="judge", spec=spec, schema=Verdict, messages=_msgs()
    )
    assert replay.cache_hit and replay.value.reason == "fresh"


@pytest.mark.parametrize(
    "name, value, says",
    [
        ("UNVEIL_MAX_RETRIES", "abc", "expected an integer"),
        ("UNVEIL_MAX_REPAIRS", "-1", "at least 0"),
        ("UNVEIL_BACKOFF_BASE", "soon", "expected a number"),
        ("UNVEIL_MAX_CONCURRENCY", "0", "at least 1"),
        ("UNVEIL_RPM", "0", "greater than 0"),
        ("UNVEIL_RPM", "-5", "greater than 0"),
        ("UNVEIL_RPM", "nan", "finite"),
        ("UNVEIL_STRUCTURED_METHOD", "xml", "json_schema"),
    ],
)
def test_bad_environment_values_name_the_variable(monkeypatch, name: str, value: str, says: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingError) as err:
        Gateway(GatewaySettings(cache_path=None))
    assert name in str(err.value) and says in str(err.value)


def test_nonsense_limits_are_refused_before_any_call() -> None:
    with pytest.raises(SettingError, match="max_concurrency"):
        BackendLimits(max_concurrency=0)
    with pytest.raises(SettingError, match="rpm"):
        BackendLimits(rpm=-1)
    with pytest.raises(SettingError, match="rpm"):
        RateLimiter(0)


@pytest.mark.parametrize(
    "limits, says",
    [
        ({"max_concurrency": 0}, "at least 1"),
        ({"rpm": 0}, "greater than 0"),
        ({"rpm": -5.0}, "greater than 0"),
        ({"rpm": float("nan")}, "finite"),
        ({"rpm": float("inf")}, "finite"),
    ],
)
def test_limits_follow_one_rule_wherever_they_are_given(limits: dict, says: str) -> None:
    builders = [lambda: GatewaySettings(cache_path=None, **limits), lambda: BackendLimits(**limits)]
    if "rpm" in limits:
        builders.append(lambda: RateLimiter(limits["rpm"]))
    messages = []
    for build in builders:
        with pytest.raises(SettingError) as err:
            build()
        messages.append(str(err.value))
    assert len(set(messages)) == 1 and says in messages[0]
