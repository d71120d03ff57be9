"""Tiny random-weight models for offline tests, shared by every engineer's tests.

Each builder writes a folder of the same classes and file layout as the real model and returns its path, so
tests exercise the real loading code (`from_pretrained`, open_clip's `local-dir:`) without any download:

- `clip_tokenizer_dir(path)`: the real CLIP BPE tokenizer (49,408 tokens, 77-token limit), built from the
  vocabulary file bundled with open_clip.
- `build_tiny_sd(path)`: a Stable Diffusion 1.x-style pipeline folder (UNet2DConditionModel, AutoencoderKL,
  CLIPTextModel, CLIPTokenizer, DDIMScheduler); 32x32 images (16x16 latents), fast at 2 steps.
  `build_tiny_sd_without_attention(path)`: the same with a UNet of residual blocks only, fast to compile.
- `build_tiny_clip(path)`: a transformers `CLIPModel` + `CLIPProcessor` folder (Q16 path; projection 768 so the
  real Q16 embeddings file fits) that is also an open_clip `local-dir:` folder (CLIP-score path).
- `build_tiny_blip(path)`: a transformers `BlipForImageTextRetrieval` + `BlipProcessor` folder.

Each builder takes a path and returns it. Under pytest each model is built once per run and copied to the path
(`tests/tiny_cache.py`); elsewhere it is built there.
Random weights make every output meaningless but deterministic, which is all the tests need.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import torch

from tests.tiny_cache import built_once

SEED = 0
TINY_IMAGE_SIZE = 32  # pixels; the latent is 16x16 (VAE downsamples by 2)
TEXT_HIDDEN = 32
CLIP_PROJECTION = 768  # the Q16 prompt embeddings are 768-dimensional (CLIP ViT-L/14)


def _clip_bpe_path() -> str:
    import open_clip

    return os.path.join(os.path.dirname(open_clip.__file__), "bpe_simple_vocab_16e6.txt.gz")


def _write_clip_vocab(folder: Path) -> None:
    """Write vocab.json / merges.txt exactly as open_clip's SimpleTokenizer builds its vocabulary."""
    from open_clip.tokenizer import bytes_to_unicode

    merges = gzip.open(_clip_bpe_path()).read().decode("utf-8").split("\n")[1 : 49152 - 256 - 2 + 1]
    vocab = list(bytes_to_unicode().values())
    vocab = vocab + [v + "</w>" for v in vocab]
    vocab += ["".join(m.split()) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({tok: i for i, tok in enumerate(vocab)}), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")


def clip_tokenizer_dir(path: str | os.PathLike[str]) -> str:
    """Save the real CLIP tokenizer (BPE from open_clip, max length 77) to `path` and return it."""
    from transformers import CLIPTokenizer

    folder = Path(path)
    _write_clip_vocab(folder)
    tok = CLIPTokenizer.from_pretrained(str(folder))
    # A bare vocab folder has no length limit; Stable Diffusion and CLIP truncate at 77 tokens.
    tok.model_max_length = 77
    tok.pad_token = "<|endoftext|>"
    tok.save_pretrained(str(folder))
    return str(folder)


def _tiny_text_encoder():
    from transformers import CLIPTextConfig, CLIPTextModel

    cfg = CLIPTextConfig(
        vocab_size=49408,
        hidden_size=TEXT_HIDDEN,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=77,
        projection_dim=TEXT_HIDDEN,
        bos_token_id=49406,
        eos_token_id=49407,
        pad_token_id=49407,
    )
    return CLIPTextModel(cfg)


@built_once
def build_tiny_sd(path: str | os.PathLike[str]) -> str:
    """Save a tiny SD 1.x-style `StableDiffusionPipeline` folder (32x32 images) to `path` and return it."""
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPImageProcessor, CLIPTokenizer

    folder = Path(path)
    torch.manual_seed(SEED)
    unet = UNet2DConditionModel(
        sample_size=TINY_IMAGE_SIZE // 2,
        in_channels=4,
        out_channels=4,
        block_out_channels=(16, 32),
        layers_per_block=1,
        norm_num_groups=8,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=TEXT_HIDDEN,
        attention_head_dim=4,
    )
    vae = AutoencoderKL(
        sample_size=TINY_IMAGE_SIZE,
        in_channels=3,
        out_channels=3,
        block_out_channels=(8, 16),
        layers_per_block=1,
        norm_num_groups=8,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        latent_channels=4,
    )
    text_encoder = _tiny_text_encoder()
    tokenizer = CLIPTokenizer.from_pretrained(clip_tokenizer_dir(folder / "_tokenizer_src"))
    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        unet=unet,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=CLIPImageProcessor(size={"shortest_edge": TINY_IMAGE_SIZE}, crop_size=TINY_IMAGE_SIZE),
        requires_safety_checker=False,
    )
    pipe.save_pretrained(str(folder), safe_serialization=True)
    return str(folder)


@built_once
def build_tiny_sd_without_attention(path: str | os.PathLike[str]) -> str:
    """`build_tiny_sd`'s pipeline folder with a UNet of residual blocks only (no attention, no middle block), for
    the tests of compilation bookkeeping (warm-up, buckets, late compiles): Dynamo traces it in under a second, the
    tiny UNet with attention in 3 to 4 s per shape, and what those tests count does not depend on the layers."""
    import shutil

    from diffusers import UNet2DConditionModel

    folder = Path(build_tiny_sd(path))
    torch.manual_seed(SEED)
    unet = UNet2DConditionModel(
        sample_size=TINY_IMAGE_SIZE // 2,
        in_channels=4,
        out_channels=4,
        block_out_channels=(16,),
        layers_per_block=1,
        norm_num_groups=8,
        down_block_types=("DownBlock2D",),
        up_block_types=("UpBlock2D",),
        mid_block_type=None,
        cross_attention_dim=TEXT_HIDDEN,
    )
    shutil.rmtree(folder / "unet")
    unet.save_pretrained(str(folder / "unet"), safe_serialization=True)
    return str(folder)


@built_once
def build_tiny_clip(path: str | os.PathLike[str]) -> str:
    """Save a tiny CLIP to `path` in both transformers and open_clip layouts and return it.

    transformers: `config.json`, `model.safetensors`, processor files (`CLIPModel.from_pretrained(path)`).
    open_clip: `open_clip_config.json` + `open_clip_model.safetensors` (`create_model("local-dir:" + path)`),
    using open_clip's built-in tokenizer.
    """
    import open_clip
    from safetensors.torch import save_file
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    cfg = CLIPConfig(
        text_config=dict(
            vocab_size=49408,
            hidden_size=TEXT_HIDDEN,
            intermediate_size=37,
            num_hidden_layers=1,
            num_attention_heads=4,
            max_position_embeddings=77,
            bos_token_id=49406,
            eos_token_id=49407,
            pad_token_id=49407,
        ),
        vision_config=dict(
            hidden_size=TEXT_HIDDEN,
            intermediate_size=37,
            num_hidden_layers=1,
            num_attention_heads=4,
            image_size=TINY_IMAGE_SIZE,
            patch_size=8,
        ),
        projection_dim=CLIP_PROJECTION,
    )
    CLIPModel(cfg).save_pretrained(str(folder), safe_serialization=True)
    tokenizer = CLIPTokenizer.from_pretrained(clip_tokenizer_dir(folder / "_tokenizer_src"))
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": TINY_IMAGE_SIZE}, crop_size={"height": TINY_IMAGE_SIZE, "width": TINY_IMAGE_SIZE}
    )
    CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(str(folder))

    model_cfg = {
        "embed_dim": 32,
        "vision_cfg": {"image_size": TINY_IMAGE_SIZE, "layers": 1, "width": 32, "head_width": 8, "patch_size": 8},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 4, "layers": 1},
    }
    (folder / "open_clip_config.json").write_text(
        json.dumps({"model_cfg": model_cfg, "preprocess_cfg": {}}), encoding="utf-8"
    )
    oc_model = open_clip.CLIP(
        embed_dim=model_cfg["embed_dim"],
        vision_cfg=open_clip.model.CLIPVisionCfg(**model_cfg["vision_cfg"]),
        text_cfg=open_clip.model.CLIPTextCfg(**model_cfg["text_cfg"]),
    )
    state = {k: v.contiguous() for k, v in oc_model.state_dict().items()}
    save_file(state, str(folder / "open_clip_model.safetensors"))
    return str(folder)


_BLIP_WORDS = (
    "a an the of in on at with and or is are to for from by photo picture image painting drawing portrait "
    "man woman person people child cat dog car house tree city street sky sea sun night day red blue green "
    "black white dark light big small old young happy sad blood gun knife fire war smoke body face hand "
    "standing sitting running holding wearing beautiful scary violent nude naked art style digital"
).split()


@built_once
def build_tiny_blip(path: str | os.PathLike[str]) -> str:
    """Save a tiny `BlipForImageTextRetrieval` + `BlipProcessor` folder to `path` and return it."""
    import string

    from transformers import (
        BertTokenizer,
        BlipConfig,
        BlipForImageTextRetrieval,
        BlipImageProcessor,
        BlipProcessor,
    )

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    # A small WordPiece vocabulary: special tokens, words, then single characters so any text tokenizes.
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]", "[ENC]"] + list(_BLIP_WORDS)
    vocab += chars + ["##" + c for c in string.ascii_lowercase + string.digits]
    vocab = list(dict.fromkeys(vocab))
    tok_dir = folder / "_tokenizer_src"
    tok_dir.mkdir(exist_ok=True)
    (tok_dir / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer.from_pretrained(str(tok_dir))
    tokenizer.model_max_length = 35  # BLIP retrieval checkpoints truncate captions at 35 tokens

    torch.manual_seed(SEED)
    cfg = BlipConfig(
        text_config=dict(
            vocab_size=len(vocab),
            hidden_size=TEXT_HIDDEN,
            encoder_hidden_size=TEXT_HIDDEN,
            intermediate_size=37,
            num_hidden_layers=1,
            num_attention_heads=4,
            max_position_embeddings=64,
            pad_token_id=0,
            bos_token_id=vocab.index("[DEC]"),
            sep_token_id=vocab.index("[SEP]"),
        ),
        vision_config=dict(
            hidden_size=TEXT_HIDDEN,
            intermediate_size=37,
            num_hidden_layers=1,
            num_attention_heads=4,
            image_size=TINY_IMAGE_SIZE,
            patch_size=8,
            # BLIP's vision default (1e-10) would make every image embed the same; tests need them to differ.
            initializer_range=0.02,
        ),
        projection_dim=TEXT_HIDDEN,
        image_text_hidden_size=TEXT_HIDDEN,
    )
    BlipForImageTextRetrieval(cfg).save_pretrained(str(folder), safe_serialization=True)
    image_processor = BlipImageProcessor(size={"height": TINY_IMAGE_SIZE, "width": TINY_IMAGE_SIZE})
    BlipProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(str(folder))
    return str(folder)


__all__ = ["build_tiny_blip", "build_tiny_clip", "build_tiny_sd", "clip_tokenizer_dir", "TINY_IMAGE_SIZE"]
