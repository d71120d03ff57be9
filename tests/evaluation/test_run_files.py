"""Run files of `unveil evaluate` are unique per configuration: two detector specs never share one file."""

from __future__ import annotations

from pathlib import Path

from evaluation.detection_configs import RunConfig
from evaluation.runs import slug


def test_slugs_of_different_texts_differ() -> None:
    assert slug("x_y") != slug("x-y")
    assert slug("scripted:a_b.json") != slug("scripted:a-b.json")
    long_a, long_b = "openai:" + "m" * 200 + "a", "openai:" + "m" * 200 + "b"
    assert slug(long_a) != slug(long_b) and len(slug(long_a)) <= 150
    assert slug("toy") == "toy" and slug("toy") == slug("toy")  # plain names stay readable and stable


def test_detector_specs_that_read_alike_get_their_own_run_files(tmp_path: Path) -> None:
    a = RunConfig("toy", "openai:x_y@http://127.0.0.1:8000/v1", "tag", 4)
    b = RunConfig("toy", "openai:x-y@http://127.0.0.1:8000/v1", "tag", 4)
    assert a.file(tmp_path) != b.file(tmp_path)
    assert a.file(tmp_path) == RunConfig(a.dataset, a.model, a.method, a.l_max).file(tmp_path)
