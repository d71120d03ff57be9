"""The registry of the web app's page kinds (`unveil.ui.kinds.KINDS`): every registered kind passes the same checks.
A tiny path of that kind is recognised as it, its start page leads to its home, its home and one sample's page
render (200), its templates exist and its pages answer 404 when the app shows another kind. A path no kind opens
is one clear error naming it. In-process (Starlette's test client), no server.

A new kind adds its tiny path to `FIXTURES`; a kind without one fails `test_every_kind_has_a_fixture` by name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.ui_data import make_ctd_dataset, make_detection_results, make_ipr_results
from unveil.ui import create_app
from unveil.ui.kinds import KINDS, PageKind, PageKindError, detect_kind
from unveil.ui.pages import HERE


def _ctd(tmp: Path) -> tuple[Path, str]:
    data = make_ctd_dataset(tmp / "ds", n_pending=1)
    return tmp / "ds", str(data["pending"][0])


def _detection(tmp: Path) -> tuple[Path, str]:
    ids = make_detection_results(tmp / "det.jsonl", tmp / "store")
    return tmp / "det.jsonl", ids[0]


def _ipr(tmp: Path) -> tuple[Path, str]:
    ids = make_ipr_results(tmp / "ipr.jsonl", tmp / "store")
    return tmp / "ipr.jsonl", ids[0]


FIXTURES: dict[str, Callable[[Path], tuple[Path, str]]] = {"ctd": _ctd, "detection": _detection, "ipr": _ipr}


def _client(path: Path, store: Path) -> TestClient:
    return TestClient(create_app(path, image_store=store), base_url="http://127.0.0.1", follow_redirects=False)


def test_every_kind_has_a_fixture() -> None:
    assert sorted(FIXTURES) == sorted(k.name for k in KINDS)
    assert len({k.name for k in KINDS}) == len(KINDS)
    assert len({k.home for k in KINDS}) == len(KINDS)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_a_path_of_each_kind_opens_its_pages(kind: PageKind, tmp_path: Path) -> None:
    path, sample_id = FIXTURES[kind.name](tmp_path)
    assert detect_kind(path) is kind
    assert kind.folder is not None or kind.record is not None, "a kind claims folders or results files"
    assert all((HERE / "templates" / name).is_file() for name in kind.templates)
    client = _client(path, tmp_path / "store")
    assert client.app.state.kind == kind.name
    assert client.get("/").headers["location"] == kind.home
    home = client.get(kind.home)
    assert home.status_code == 200, home.text
    assert f'class="kind-{kind.name}"' in home.text
    sample = client.get(kind.sample_page.format(id=sample_id))
    assert sample.status_code == 200, sample.text
    assert sample_id in sample.text
    for other in KINDS:
        if other is not kind:
            assert client.get(other.home).status_code == 404, other.name


def _unknown_folder(tmp: Path) -> Path:
    (tmp / "notes").mkdir()
    (tmp / "notes" / "readme.txt").write_text("not a dataset\n")
    return tmp / "notes"


def _empty_folder(tmp: Path) -> Path:
    (tmp / "empty").mkdir()
    return tmp / "empty"


def _records_of_no_kind(tmp: Path) -> Path:
    (tmp / "other.jsonl").write_text(json.dumps({"id": "a", "text": "hello"}) + "\n")
    return tmp / "other.jsonl"


def _no_records(tmp: Path) -> Path:
    (tmp / "empty.jsonl").write_text("\n")
    return tmp / "empty.jsonl"


def _missing(tmp: Path) -> Path:
    return tmp / "nowhere.jsonl"


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (_unknown_folder, "a folder no page opens"),
        (_empty_folder, "a folder no page opens"),
        (_records_of_no_kind, "records of no page kind"),
        (_no_records, "no JSONL records with an id"),
        (_missing, "no such file or folder"),
    ],
    ids=["unknown-folder", "empty-folder", "records-of-no-kind", "no-records", "missing"],
)
def test_a_path_no_kind_opens_is_one_clear_error(make: Callable[[Path], Path], says: str, tmp_path: Path) -> None:
    path = make(tmp_path)
    with pytest.raises(PageKindError) as caught:
        create_app(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {says}")
    if path.suffix != ".jsonl" or "records" in says:  # it says what would have opened
        expected = [k.describes for k in KINDS if (k.folder if path.suffix != ".jsonl" else k.record) is not None]
        assert all(d in message for d in expected), message
