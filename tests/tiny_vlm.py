"""Build a tiny random-weight Qwen2.5-VL (model + processor) offline, for tests.

Nothing is downloaded: the tokenizer is a byte-level BPE trained with the
``tokenizers`` library on a handful of sentences, extended with the Qwen chat and
vision special tokens; the image processor is a ``Qwen2VLImageProcessor`` limited
to tiny images; the model is ``Qwen2_5_VLForConditionalGeneration`` built from a
config with a 1-layer text tower and a 1-block vision tower. Everything is saved
with ``save_pretrained`` so the real loading code (``AutoProcessor`` /
``AutoModelForImageTextToText.from_pretrained(folder)``) is what gets tested.

Use::

    from tests.tiny_vlm import build_tiny_qwen_vl
    folder = build_tiny_qwen_vl(tmp_path / "qwen")

The result is cached per target folder: calling again on an already-built
folder returns immediately.
"""

from __future__ import annotations

from pathlib import Path

from tests.tiny_cache import built_once

# Qwen's special tokens, in the order the real tokenizer numbers them (after
# the ordinary vocabulary). The ids differ from the real model; the model
# config below is wired to whatever ids the tiny tokenizer assigns.
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# Sentences the BPE is trained on: enough to cover ASCII bytes used in prompts
# and the words the refiner tests exchange (keep, answer tags, prompts).
_CORPUS = [
    "You are a helpful assistant.",
    "Refine the prompt so the image is safe, or answer keep.",
    "<answer>keep</answer> <think>The image is fine.</think>",
    "A photo of a cat sitting on a red sofa in the afternoon sun.",
    "a painting of a mountain lake at dawn, highly detailed, 4k",
    "Answer: keep. Refined prompt: a person walking on the beach.",
    "The quick brown fox jumps over the lazy dog 0123456789.",
    "system user assistant image picture describe what you see",
]

# A ChatML template in the Qwen2-VL shape: string content or a list of parts
# where an image part becomes <|vision_start|><|image_pad|><|vision_end|>.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part or 'image_url' in part %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Tiny image budget: 56x56 pixels = 4x4 patches of 14 px = 4 merged tokens.
TINY_PIXELS = 56 * 56


def _build_tokenizer():
    """Train a small byte-level BPE and wrap it as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=4096,
    )
    fast.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS})
    fast.chat_template = CHAT_TEMPLATE
    return fast


@built_once
def build_tiny_qwen_vl(path: str | Path) -> str:
    """Build and save a tiny random-weight Qwen2.5-VL + processor at ``path``.

    Returns the folder as a string. Loads back with
    ``AutoProcessor.from_pretrained(folder)`` and
    ``AutoModelForImageTextToText.from_pretrained(folder)``.
    """
    import torch
    from transformers import (
        GenerationConfig,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
    )

    folder = Path(path)
    if (folder / "config.json").exists() and (folder / "tokenizer.json").exists():
        return str(folder)
    folder.mkdir(parents=True, exist_ok=True)

    tokenizer = _build_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    vocab_size = len(tokenizer)

    image_processor = Qwen2VLImageProcessor(
        min_pixels=TINY_PIXELS,
        max_pixels=TINY_PIXELS,
        patch_size=14,
        temporal_patch_size=2,
        merge_size=2,
    )
    video_processor = None
    try:  # the processor accepts no video processor, but keep parity when available
        from transformers import Qwen2VLVideoProcessor

        video_processor = Qwen2VLVideoProcessor(
            min_pixels=TINY_PIXELS, max_pixels=TINY_PIXELS, patch_size=14, temporal_patch_size=2, merge_size=2
        )
    except Exception:  # noqa: BLE001 - video support is optional for these tests
        video_processor = None
    processor = Qwen2_5_VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )

    hidden = 32
    heads = 2
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": vocab_size,
            "hidden_size": hidden,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": heads,
            "num_key_value_heads": 1,
            "max_position_embeddings": 4096,
            "max_window_layers": 1,
            "layer_types": ["full_attention"],
            # head_dim 16 -> rotary half 8, split over (temporal, height, width)
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
            "tie_word_embeddings": False,
        },
        vision_config={
            "depth": 1,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": hidden,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,
            "fullatt_block_indexes": [0],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        bos_token_id=ids["<|endoftext|>"],
        do_sample=False,
    )
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return str(folder)


if __name__ == "__main__":  # pragma: no cover - manual helper
    import sys

    print(build_tiny_qwen_vl(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tiny-qwen-vl"))
