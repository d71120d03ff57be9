"""The reward renderer's DPM-Solver++ scheduler is its own: the process-wide pipeline of the same spec keeps its
scheduler (other users of the spec, e.g. an evaluation in the same process, are unaffected)."""

from __future__ import annotations

from tools.image_store import get_image_store
from tools.t2i.registry import open_generator
from tools.t2i.settings import RenderSettings


def test_dpm_scheduler_does_not_touch_the_shared_pipeline(tmp_path) -> None:
    from tests.tiny import build_tiny_sd
    from training.render import make_renderer

    sd = build_tiny_sd(tmp_path / "sd")
    store = get_image_store(tmp_path / "images")
    spec = f"diffusers:{sd}"
    shared = open_generator(spec, store=store, max_batch=32, device="cpu")
    before = type(shared.pipeline.scheduler)
    render = RenderSettings(steps=2, guidance=7.0, width=32, height=32)
    renderer = make_renderer(spec, store=store, device="cpu", render=render, scheduler="dpm")
    assert type(renderer.generator.pipeline.scheduler).__name__ == "DPMSolverMultistepScheduler"
    assert type(shared.pipeline.scheduler) is before and before.__name__ != "DPMSolverMultistepScheduler"
    assert renderer.generator.pipeline.unet is shared.pipeline.unet  # weights shared, not copied
    images = renderer.render(["a red cube", "a blue ball"], [1, 2])
    assert len(images) == 2 and images[0].size == (32, 32)
