"""CTD generation from Python, without the CLI (issue 46 item 1): `runner.ctd_run.CtdRun` says what to make and
`runner.ctd_run.main` makes it, as `unveil generate` does through the same call. Scripted models and the tiny
random-weight Stable Diffusion pipeline, as in tests/graphs/test_ctd.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.ctd_dataset import load_samples
from runner.ctd_run import CtdRun, CtdRunError, ctd_context, main
from tests.graphs.test_ctd import accepting_script, fresh_gateway, tiny_sd, write_script

__all__ = ["fresh_gateway", "tiny_sd"]  # fixtures shared with test_ctd.py


def _run(out: Path, spec: str, t2i: str, **kw: object) -> CtdRun:
    ctx = ctd_context(out, model=spec, generator=t2i, width=32, height=32, steps=2, web_search=False, review="auto")
    settings: dict[str, object] = {"category": "drugs", "n": 2, "near_duplicate": 0.0, "progress": False, **kw}
    return CtdRun(out=out, context=ctx, concurrency=2, **settings)  # type: ignore[arg-type]


def test_a_ctd_run_is_built_and_run_from_python_and_resumes(tmp_path: Path, tiny_sd: str) -> None:
    out = tmp_path / "ds"
    run = _run(out, write_script(tmp_path, accepting_script()), tiny_sd)
    result = main(run)
    assert (result.completed, result.failed, result.skipped, result.revised) == (2, 0, 0, 0)
    assert result.statuses == {"accepted": 2} and result.stopped is None and result.export is None
    samples = load_samples(out)
    assert sorted(samples) == ["drugs-00000", "drugs-00001"]
    assert all((out / rec["image"]).is_file() for rec in samples.values())  # the folder's own image store
    again = main(run)  # the same run again: every scene is already in the folder
    assert (again.completed, again.skipped) == (0, 2) and again.statuses == {"accepted": 2}


def test_a_ctd_run_refuses_its_settings_by_name_before_its_folder(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    bad = [
        (_run(out, "scripted:unused.json", "diffusers:unused", category="not-a-category"), "category"),
        (_run(out, "scripted:unused.json", "diffusers:unused", scene="s" * 3000), "scene"),
        (
            CtdRun(out=out, category="drugs", n=1, context=ctd_context(tmp_path / "elsewhere"), near_duplicate=0.0),
            "context",
        ),
    ]
    for run, name in bad:
        with pytest.raises(CtdRunError) as refused:
            main(run)
        assert refused.value.field == name and str(refused.value).startswith(name)
    assert not out.exists()
