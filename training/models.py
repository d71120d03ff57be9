"""Loading the refiner VLM and its processor for training, and the LoRA configuration.

The same loading classes as the `hf:` provider (`AutoModelForImageTextToText`, `AutoProcessor`) so what is
trained is what the IPR graph later loads; an existing adapter is opened trainable to continue from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tools.env import SettingError
from training.config import TrainSettings

if TYPE_CHECKING:
    from peft import LoraConfig, PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, ProcessorMixin


def use_cuda(settings: TrainSettings) -> bool:
    """Whether this run trains on a GPU."""
    import torch

    return torch.cuda.is_available() and not settings.cpu


def precision_flags(settings: TrainSettings) -> dict[str, bool]:
    """`bf16`/`fp16` trainer flags: bf16 on GPU by default, full precision on CPU."""
    p = settings.precision
    if p == "auto":
        p = "bf16" if use_cuda(settings) else "fp32"
    if p not in ("bf16", "fp16", "fp32"):
        raise SettingError(f"precision {settings.precision!r}: expected auto, bf16, fp16 or fp32")
    return {"bf16": p == "bf16", "fp16": p == "fp16"}


def lora_config(settings: TrainSettings) -> LoraConfig:
    """The LoRA adapter: by default the authors' code's r=8, alpha=16, dropout 0.05 on q_proj and v_proj (the paper
    says only that LoRA is used)."""
    from peft import LoraConfig

    return LoraConfig(
        r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        target_modules=list(settings.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )


def load_processor(settings: TrainSettings) -> ProcessorMixin | PreTrainedTokenizerBase:
    """The model's processor, with the image budget when set; left padding as generation needs."""
    from transformers import AutoProcessor, ProcessorMixin

    kwargs: dict[str, Any] = {}
    if settings.min_pixels:
        kwargs["min_pixels"] = settings.min_pixels
    if settings.max_pixels:
        kwargs["max_pixels"] = settings.max_pixels
    # transformers leaves the Auto classes' `from_pretrained` unannotated.
    processor: ProcessorMixin | PreTrainedTokenizerBase = AutoProcessor.from_pretrained(  # type: ignore[no-untyped-call]
        settings.model, **kwargs
    )
    tok = processor.tokenizer if isinstance(processor, ProcessorMixin) else processor
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return processor


def load_model(settings: TrainSettings) -> tuple[PreTrainedModel | PeftModel, LoraConfig | None]:
    """The base VLM (bf16 weights on GPU), with `settings.adapter` applied trainable when given.

    Returns (model, peft_config): peft_config is the new LoRA to add, or None when an adapter was loaded.
    """
    import torch
    from transformers import AutoModelForImageTextToText

    flags = precision_flags(settings)
    dtype = torch.bfloat16 if flags["bf16"] else torch.float16 if flags["fp16"] else torch.float32
    model = AutoModelForImageTextToText.from_pretrained(settings.model, dtype=dtype)
    if settings.adapter:
        from peft import PeftModel

        return PeftModel.from_pretrained(model, settings.adapter, is_trainable=True), None
    return model, lora_config(settings)


def common_trainer_args(settings: TrainSettings) -> dict[str, Any]:
    """TrainingArguments shared by SFTConfig and GRPOConfig."""
    return dict(
        output_dir=settings.output_dir,
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=settings.per_device_batch_size,
        gradient_accumulation_steps=settings.gradient_accumulation_steps,
        max_steps=settings.max_steps if settings.max_steps > 0 else -1,
        num_train_epochs=settings.num_train_epochs,
        lr_scheduler_type=settings.lr_scheduler_type,
        max_grad_norm=settings.max_grad_norm,
        warmup_steps=settings.warmup_steps,
        gradient_checkpointing=settings.gradient_checkpointing and use_cuda(settings),
        gradient_checkpointing_kwargs={"use_reentrant": False},
        logging_steps=settings.logging_steps,
        save_strategy="steps" if settings.save_steps > 0 else "no",
        save_steps=settings.save_steps if settings.save_steps > 0 else 500,
        report_to=list(settings.report_to),
        run_name=settings.run_name or None,
        seed=settings.seed,
        use_cpu=not use_cuda(settings),
        remove_unused_columns=False,
        **precision_flags(settings),
    )
