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
