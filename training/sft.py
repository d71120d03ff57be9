"""Supervised fine-tuning of the IPR refiner with TRL's `SFTTrainer` and a LoRA adapter.

Examples are prompt-completion conversations (the refiner's messages + the labelled answer), so TRL puts the
loss on the answer tokens only; image examples go through TRL's vision-language collator, text-only ones (the
POSI baseline) through the tokenizer. The adapter and the settings are saved to `output_dir`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.atomic_files import atomic_write_text
from tools.env import SettingError
from training.config import SFTSettings, settings_dict
from training.models import common_trainer_args, load_model, load_processor

if TYPE_CHECKING:
    from datasets import Dataset
    from trl import SFTTrainer

log = logging.getLogger("unveil.training.sft")


def build_sft_trainer(settings: SFTSettings, dataset: Dataset | None = None) -> SFTTrainer:
    """The configured `SFTTrainer` (dataset from `settings.data` unless given)."""
    from trl import SFTConfig, SFTTrainer

    if dataset is None:
        from tools.image_store import get_image_store
        from training.data import load_sft_dataset

        if not settings.data:
            raise SettingError("SFT needs data: a labelled JSONL, a ToxiClean-IT folder or POSI pairs (--data)")
        dataset = load_sft_dataset(
            settings.data, kind=settings.data_kind, store=get_image_store(settings.image_store or None)
        )
    processor = load_processor(settings)
    vision = "images" in dataset.column_names or "image" in dataset.column_names
    # A text-only dataset trains through the tokenizer; the vision collator needs images in every batch.
    processing_class = processor if vision else getattr(processor, "tokenizer", processor)
    model, peft_config = load_model(settings)
    args = SFTConfig(
        **common_trainer_args(settings),
        completion_only_loss=True,
        max_length=settings.max_length or None,
    )
    return SFTTrainer(
        model=model, args=args, train_dataset=dataset, processing_class=processing_class, peft_config=peft_config
    )


def run_sft(settings: SFTSettings, dataset: Dataset | None = None) -> dict[str, Any]:
    """Train, save the adapter (+ processor and settings) to `output_dir`, and return the final metrics."""
    trainer = build_sft_trainer(settings, dataset)
    result = trainer.train()
    out = Path(settings.output_dir)
    trainer.save_model(str(out))
    # a side file beside the model: replaced atomically, never written through a link planted at its name
    atomic_write_text(out / "unveil_settings.json", json.dumps(settings_dict(settings), indent=2))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {
        "output_dir": str(out),
        "steps": trainer.state.global_step,
        "train_loss": result.training_loss,
        "losses": losses,
    }
