"""`training.grpo.enable_fast_sampling`: the trainer's generation settings and the eager fallback.

The compiled decoding itself needs a GPU (bench/grpo_step.py --sampling-only measures it); here a stand-in
trainer records what TRL's generation would receive.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers import GenerationConfig

from training.grpo import enable_fast_sampling


def fake_trainer(fail_first: BaseException | None = None) -> Any:
    calls: list[tuple[str | None, bool]] = []
    trainer = SimpleNamespace(
        generation_config=GenerationConfig(max_new_tokens=4, disable_compile=True),
        generation_kwargs={"max_new_tokens": 4, "cache_implementation": None},
        calls=calls,
    )

    def generate(prompts: list[str]) -> list[str]:
        calls.append((trainer.generation_config.cache_implementation, trainer.generation_config.disable_compile))
        if fail_first is not None and len(calls) == 1:
            raise fail_first
        return [p + "!" for p in prompts]

    trainer._generate_single_turn = generate
    return trainer


def test_static_cache_and_compilation_are_switched_on():
    trainer = fake_trainer()
    enable_fast_sampling(trainer)
    assert trainer._generate_single_turn(["a"]) == ["a!"]
    assert trainer.calls == [("static", False)]
    assert trainer.generation_kwargs["cache_implementation"] == "static"


def test_a_compilation_failure_falls_back_to_eager_sampling():
    trainer = fake_trainer(torch._dynamo.exc.TorchDynamoException("inductor exploded"))
    enable_fast_sampling(trainer)
    with pytest.warns(RuntimeWarning, match="sampling eagerly"):
        assert trainer._generate_single_turn(["b"]) == ["b!"]
    assert trainer.calls == [("static", False), (None, True)]
    assert trainer._generate_single_turn(["c"]) == ["c!"]  # stays eager
    assert trainer.calls[-1] == (None, True)


def test_other_errors_are_raised():
    trainer = fake_trainer(ValueError("bad batch"))
    enable_fast_sampling(trainer)
    with pytest.raises(ValueError, match="bad batch"):
        trainer._generate_single_turn(["d"])
    assert trainer.generation_config.disable_compile is False


def test_the_first_sampling_call_shares_its_compiled_decoding_through_the_cluster_folder(tmp_path, monkeypatch):
    """With `UNVEIL_COMPILE_SHARED`, the first sampling call of one machine saves the decoding it compiled, and the
    first call on another machine loads that file before it samples (later calls neither load nor save)."""
    import socket

    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("UNVEIL_COMPILE_SHARED", str(tmp_path / "cluster"))
    events: list[str] = []
    from tests.compile_artefacts import artefact_file

    decoding = artefact_file(("autotune", "de/decoding.best_config", b"{}"))  # torch's format: loads check it
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (decoding, None))
    monkeypatch.setattr(
        torch.compiler, "load_cache_artifacts", lambda data: events.append("load decoding" if data == decoding else "?")
    )

    def machine(host: str, compiles: bool) -> Any:
        monkeypatch.setattr(socket, "gethostname", lambda: host)
        trainer = fake_trainer()
        inner = trainer._generate_single_turn

        def generate(prompts: list[str]) -> list[str]:
            events.append("sample")
            if compiles:
                counters["inductor"]["fxgraph_cache_miss"] += 1  # what transformers' compilation counts
            return inner(prompts)

        trainer._generate_single_turn = generate
        enable_fast_sampling(trainer)
        return trainer

    first = machine("machine-a", compiles=True)
    assert first._generate_single_turn(["a"]) == ["a!"] and first._generate_single_turn(["b"]) == ["b!"]
    files = list((tmp_path / "cluster").iterdir())
    assert len(files) == 1 and "machine-a" in files[0].name and files[0].read_bytes() == decoding
    assert events == ["sample", "sample"]
    second = machine("machine-b", compiles=False)
    assert second._generate_single_turn(["c"]) == ["c!"] and second._generate_single_turn(["d"]) == ["d!"]
    assert events[2:] == ["load decoding", "sample", "sample"]
    assert len(list((tmp_path / "cluster").iterdir())) == 1  # it compiled nothing: nothing saved
