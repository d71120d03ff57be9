"""The Ray pool's waiting and resending with fake actor handles (no cluster): a member that is restarting is
waited for and the request sent again, whatever Ray raises meanwhile; one that does not come back fails its
requests at the restart deadline with a clear error; a request that keeps killing its members fails."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

import pytest

pytest.importorskip("ray")

from ray.exceptions import ActorDiedError, ActorUnavailableError

from runner.ray.pool import ActorPool
from runner.ray.settings import RETRIES, PoolSettings, PoolStalledError


class FakeRef:
    """What `actor.method.remote()` returns: awaitable, with a `future()` for callbacks."""

    def __init__(self, fn: Any):
        self._future: Future[Any] = Future()
        # Answered on another thread, as Ray answers on its own.
        threading.Thread(target=self._answer, args=(fn,), daemon=True).start()

    def _answer(self, fn: Any) -> None:
        try:
            self._future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting side
            self._future.set_exception(exc)

    def future(self) -> Future[Any]:
        return self._future

    def __await__(self) -> Any:
        return asyncio.wrap_future(self._future).__await__()


class FakeMethod:
    def __init__(self, fn: Any):
        self.fn = fn

    def remote(self, *args: Any) -> FakeRef:
        return FakeRef(lambda: self.fn(*args))


@pytest.fixture(autouse=True)
def _quick_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarting member is asked `ready()` again every 20 ms instead of every 0.5 s: the fakes answer at once,
    and what is checked is which calls are made, not how long apart."""
    import runner.ray.pool

    monkeypatch.setattr(runner.ray.pool, "PROBE_INTERVAL_S", 0.02)


def unavailable() -> ActorUnavailableError:
    return ActorUnavailableError("The actor is restarting", None)


class FakeActor:
    """A member whose `work` raises the errors of `work_errors` in turn, then answers; its `ready` raises those
    of `ready_errors` in turn (restarting), then answers."""

    def __init__(self, work_errors: list[BaseException], ready_errors: list[BaseException] | None = None):
        self.work_errors = list(work_errors)
        self.ready_errors = list(ready_errors or [])
        self.ready_calls = 0
        self.work_calls = 0
        self.lock = threading.Lock()
        self.ready = FakeMethod(self._ready)
        self.work = FakeMethod(self._work)

    def _ready(self) -> dict[str, Any]:
        with self.lock:
            self.ready_calls += 1
            if self.ready_calls > 1 and self.ready_errors:  # the first answer: the member started
                raise self.ready_errors.pop(0)
        return {"pid": 1}

    def _work(self, value: int) -> int:
        with self.lock:
            self.work_calls += 1
            if self.work_errors:
                raise self.work_errors.pop(0)
        return value


def run_calls(pool: ActorPool, n: int) -> list[int]:
    async def every() -> list[int]:
        return list(await asyncio.wait_for(asyncio.gather(*(pool.call("work", i) for i in range(n))), 60))

    return asyncio.run(every())


@pytest.mark.parametrize("n", [1, RETRIES + 1, 25])
def test_a_request_to_a_restarting_member_waits_for_it_and_succeeds(n: int) -> None:
    """The attack as seen: every send during a restart answered ActorUnavailableError ('The actor is restarting');
    before, the request failed after 3 quick resends. Now each failure waits for `ready()` and sends again."""
    # The member answers `ready()` again only after two more refusals (each waits the probe interval).
    actor = FakeActor([unavailable() for _ in range(n)], ready_errors=[unavailable(), unavailable()])
    pool = ActorPool(lambda _k: actor, 1, name="fake pool")
    assert run_calls(pool, 1) == [0]
    assert actor.work_calls == n + 1
    assert actor.ready_calls >= n + 2  # asked whether it was back after each failure
    assert pool.started == [True] and pool.load == [0]


def test_deaths_with_restarts_left_fail_nothing() -> None:
    """Every in-flight request of a killed member sees ActorDiedError; with restarts left, all are sent again."""
    actor = FakeActor([ActorDiedError() for _ in range(RETRIES)], ready_errors=[unavailable(), unavailable()])
    pool = ActorPool(lambda _k: actor, 1, name="fake pool")
    assert sorted(run_calls(pool, 6)) == list(range(6))


def test_a_request_that_keeps_killing_its_member_fails() -> None:
    """A request whose member died under it more than `retries` times is not sent again (it may be what kills)."""
    actor = FakeActor([ActorDiedError() for _ in range(RETRIES + 1)])
    pool = ActorPool(lambda _k: actor, 1, name="fake pool")
    with pytest.raises(ActorDiedError):
        run_calls(pool, 1)
    assert actor.work_calls == RETRIES + 1


def test_a_member_that_does_not_come_back_fails_at_the_restart_deadline() -> None:
    """A member still restarting at `restart_timeout_s` ends: its waiting requests fail naming the setting."""
    actor = FakeActor([unavailable()], ready_errors=[unavailable() for _ in range(10_000)])
    settings = PoolSettings(pool="fake", restart_timeout_s=0.2)
    pool = ActorPool(lambda _k: actor, 1, name="fake pool", settings=settings)
    with pytest.raises(PoolStalledError, match=r"fake pool: .*within 0.2 s .*UNVEIL_RAY_RESTART_TIMEOUT"):
        run_calls(pool, 1)


def test_another_member_takes_the_request_while_one_restarts() -> None:
    """Requests do not wait for the restarting member when another is started."""
    down = FakeActor([unavailable()], ready_errors=[unavailable() for _ in range(10_000)])
    up = FakeActor([])
    pool = ActorPool(
        lambda k: (down, up)[k],
        2,
        name="fake pool",
        settings=PoolSettings(pool="fake", inflight=1, restart_timeout_s=5),
    )
    assert sorted(run_calls(pool, 8)) == list(range(8))
    assert up.work_calls >= 7


@pytest.mark.parametrize(
    "name,value",
    [
        ("UNVEIL_RAY_RENDER_ACTORS", "0"),
        ("UNVEIL_RAY_RENDER_ACTORS", "1e9"),
        ("UNVEIL_RAY_RENDER_ACTORS", "2.5"),
        ("UNVEIL_RAY_RENDER_GPUS", "-1"),
        ("UNVEIL_RAY_RENDER_GPUS", "nan"),
        ("UNVEIL_RAY_RENDER_CPUS", "inf"),
        ("UNVEIL_RAY_RENDER_INFLIGHT", "100000"),
        ("UNVEIL_RAY_RENDER_RESOURCES", '{"render": -1}'),
        ("UNVEIL_RAY_RENDER_RESOURCES", '{"render": 1e300}'),
        ("UNVEIL_RAY_RENDER_RESOURCES", '{"render": true}'),
        ("UNVEIL_RAY_RESTART_TIMEOUT", "0"),
        ("UNVEIL_RAY_RESTART_TIMEOUT", "1e12"),
        ("UNVEIL_RAY_START_TIMEOUT", "inf"),
    ],
)
def test_pool_settings_from_the_environment_are_bounded(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    """Each pool setting read from the environment has bounds; a value outside them is one error naming it."""
    from runner.ray.settings import render_settings
    from tools.env import SettingError

    monkeypatch.setenv(name, value)
    with pytest.raises(SettingError, match=name):
        render_settings()


def test_pool_settings_within_their_bounds_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.ray.settings import render_settings

    for name, value in (("ACTORS", "3"), ("GPUS", "0.5"), ("CPUS", "2"), ("INFLIGHT", "0")):
        monkeypatch.setenv(f"UNVEIL_RAY_RENDER_{name}", value)
    monkeypatch.setenv("UNVEIL_RAY_RESTART_TIMEOUT", "30")
    got = render_settings()
    assert (got.actors, got.gpus, got.cpus, got.inflight, got.restart_timeout_s) == (3, 0.5, 2.0, 0, 30.0)
    assert PoolSettings(pool="render").restart_timeout_s == 600.0  # the default
