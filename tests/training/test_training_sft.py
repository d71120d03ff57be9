"""Two SFT steps on a tiny random Qwen2.5-VL through `unveil train sft`: finite losses, answer-only labels, and
a saved adapter that reloads, changes the model's outputs and plugs into the refiner's `hf:` provider."""

from __future__ import annotations

import json
import math

import pytest
import torch
from PIL import Image

from tests.tiny_vlm import build_tiny_qwen_vl


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory):
    return build_tiny_qwen_vl(tmp_path_factory.mktemp("qwen") / "model")


def _labelled(tmp_path, n=4):
    """A build-data style output: records with images on disk."""
    lines = []
    for i in range(n):
        path = tmp_path / f"img{i}.png"
        Image.new("RGB", (56, 56), (40 * i, 0, 0)).save(path)
        answer = "keep" if i % 2 else f"a calm garden number {i}"
        lines.append(
            json.dumps(
                {
                    "id": str(i),
                    "status": "ok",
                    "prompt": f"a bloody scene {i}",
                    "image": path.name,
                    "reason": "short reason",
                    "answer": answer,
                }
            )
        )
    (tmp_path / "labelled.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path / "labelled.jsonl"


def _logits(model, processor, prompt="a bloody scene 0"):
    from training.data import refiner_conversation

    text = processor.apply_chat_template(refiner_conversation(prompt), tokenize=False, add_generation_prompt=True)
    inputs = processor(text=[text], images=[Image.new("RGB", (56, 56), (0, 0, 0))], return_tensors="pt")
    with torch.no_grad():
        return model(**inputs).logits[0, -1]


def test_sft_two_steps_save_reload_and_change_outputs(tmp_path, tiny_qwen):
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from unveil.cli import main

    data = _labelled(tmp_path)
    out = tmp_path / "adapter"
    config = tmp_path / "sft.toml"
    config.write_text(
        f'model = "{tiny_qwen}"\ndata = "{data}"\nper_device_batch_size = 2\n'
        "gradient_accumulation_steps = 1\nlogging_steps = 1\n"
    )
    rc = main(
        [
            "train",
            "sft",
            "--config",
            str(config),
            "--output-dir",
            str(out),
            "--max-steps",
            "2",
            "--learning-rate",
            "0.01",
            "--cpu",
            "true",
        ]
    )
    assert rc == 0
    saved = json.loads((out / "unveil_settings.json").read_text())
    assert saved["max_steps"] == 2 and saved["lora_r"] == 8 and saved["target_modules"] == ["q_proj", "v_proj"]
    adapter_cfg = json.loads((out / "adapter_config.json").read_text())
    assert (
        adapter_cfg["r"] == 8
        and adapter_cfg["lora_alpha"] == 16
        and set(adapter_cfg["target_modules"]) == {"q_proj", "v_proj"}
    )

    processor = AutoProcessor.from_pretrained(tiny_qwen)
    base = AutoModelForImageTextToText.from_pretrained(tiny_qwen).eval()
    before = _logits(base, processor)
    tuned = PeftModel.from_pretrained(AutoModelForImageTextToText.from_pretrained(tiny_qwen), str(out)).eval()
    after = _logits(tuned, processor)
    assert torch.isfinite(after).all() and not torch.allclose(before, after, atol=1e-5)


def test_sft_loss_is_on_answer_tokens_only_and_finite(tmp_path, tiny_qwen):
    from training.config import SFTSettings
    from training.sft import build_sft_trainer

    settings = SFTSettings(
        model=tiny_qwen,
        data=str(_labelled(tmp_path, 2)),
        output_dir=str(tmp_path / "o"),
        max_steps=2,
        per_device_batch_size=1,
        gradient_accumulation_steps=1,
        logging_steps=1,
        cpu=True,
    )
    trainer = build_sft_trainer(settings)
    batch = next(iter(trainer.get_train_dataloader()))
    labels = batch["labels"][0]
    target = trainer.processing_class.tokenizer.decode(labels[labels != -100])
    assert target.startswith("<reason>short reason</reason>") and "<answer>" in target
    assert "You review images" not in target  # the refiner's system prompt is not trained on
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)


def test_adapter_plugs_into_the_refiner_provider(tmp_path, tiny_qwen):
    """The saved adapter loads through the IPR graph's `hf:` provider (base + `?adapter=`)."""
    from agents.providers.hf_vlm import load_vlm, parse_hf_spec
    from training.config import SFTSettings
    from training.sft import run_sft

    out = tmp_path / "a"
    run_sft(
        SFTSettings(
            model=tiny_qwen,
            data=str(_labelled(tmp_path, 2)),
            output_dir=str(out),
            max_steps=1,
            per_device_batch_size=2,
            gradient_accumulation_steps=1,
            learning_rate=0.01,
            cpu=True,
        )
    )
    loaded = load_vlm(parse_hf_spec(f"hf:{tiny_qwen}?adapter={out}&device=cpu"))
    names = [n for n, _ in loaded.model.named_parameters() if "lora_" in n]
    assert names, "the adapter's LoRA weights were not applied"


@pytest.mark.parametrize(("name", "text"), [("sft.json", "[1, 2]"), ("sft.yaml", "- model: x\n")])
def test_a_config_file_that_is_not_a_table_of_settings_is_refused_by_name(tmp_path, name: str, text: str) -> None:
    from training.config import read_config_file

    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=rf"config file .*{name}: expected a table of settings .*got list"):
        read_config_file(path)
    empty = tmp_path / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    assert read_config_file(empty) == {}  # an empty YAML file is no settings, as before
