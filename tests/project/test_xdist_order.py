"""The order pytest-xdist hands out the suite's work units in (`tests/conftest.py: _heaviest_first`): the units
with slow tests first, the longest allowed first, and the many short tests last, where they fill in on whichever
worker is free. pytest-xdist's own order (most tests first) started the README's demo on the embedded model, one
test of minutes, among the last units, and the other worker then waited for it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import _hand_out_in_collection_order, _heaviest_first


def _item(nodeid: str, *marks: Any) -> Any:
    by_name = {mark.name: mark for mark in marks}
    config = SimpleNamespace(getini=lambda name: "300")
    return SimpleNamespace(nodeid=nodeid, config=config, get_closest_marker=by_name.get)


def test_slow_units_go_first_the_longest_allowed_first_and_each_unit_keeps_its_order() -> None:
    group = pytest.mark.xdist_group("mod").mark
    items = [
        _item("a.py::fast_1"),
        _item("a.py::fast_2"),
        _item("m.py::fast_in_group", group),
        _item("m.py::slow_in_group", group, pytest.mark.slow.mark),
        _item("b.py::fast_3"),
        _item("d.py::demo", pytest.mark.slow.mark, pytest.mark.timeout(1200).mark),
        _item("k.py::kill", pytest.mark.slow.mark),
        _item("g.py::one", pytest.mark.xdist_group(name="many").mark),
        _item("g.py::two", pytest.mark.xdist_group(name="many").mark),
    ]
    order = [item.nodeid for item in _heaviest_first(items)]
    assert order == [
        "d.py::demo",  # 1200 s allowed
        "m.py::fast_in_group",  # 300 s: the group's tests stay together and in their order
        "m.py::slow_in_group",
        "k.py::kill",  # 300 s, one test: after the group of two
        "g.py::one",  # no slow test: by number of tests
        "g.py::two",
        "a.py::fast_1",
        "a.py::fast_2",
        "b.py::fast_3",
    ]


def test_the_controller_hands_the_units_out_in_the_collected_order() -> None:
    option = SimpleNamespace(dist="loadgroup", loadscopereorder=True)
    _hand_out_in_collection_order(SimpleNamespace(option=option))  # type: ignore[arg-type]
    assert option.loadscopereorder is False
    option = SimpleNamespace(dist="load", loadscopereorder=True)  # other modes: pytest-xdist's own order
    _hand_out_in_collection_order(SimpleNamespace(option=option))  # type: ignore[arg-type]
    assert option.loadscopereorder is True


def test_this_run_collects_its_slow_units_first(request: pytest.FixtureRequest) -> None:
    """Under `--dist loadgroup` a worker's collection, which the controller hands out in order, has each slow test
    that is a unit of its own before every fast one."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not a pytest-xdist worker under --dist loadgroup")
    alone = [item for item in request.session.items if not item.get_closest_marker("xdist_group")]
    slow = [bool(item.get_closest_marker("slow")) for item in alone]
    assert slow == sorted(slow, reverse=True)
