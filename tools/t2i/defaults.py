"""Every default generation value, in one place, each labelled with where it comes from.

Sources: **paper** (the IPR paper, or the TAG paper where named), **authors' code** (the IPR authors' public
repository, ku-dmlab/IPR: `eval.py` for evaluation, `vl_rl.py` for GRPO, `vl_sft.py` for SFT), **diffusers** (the
library's own pipeline default) or **ours** (a choice of this project, for a value neither paper gives).

Neither paper states a guidance scale, step count or image size. The IPR paper's numbers were produced by its
authors' code, which renders every image (evaluation, IPR steps and rewards) at guidance 7.0 with the pipeline's
default 50 steps, ignoring I2P's per-prompt guidance; so every IPR use here defaults to 7.0 (the I2P/SLD protocol's
per-prompt values stay available: `unveil evaluate ipr --prompt-guidance`). The TAG paper renders CTD images with
GPT-Image-1, which has no such settings; CTD on Stable Diffusion uses diffusers' default guidance with fewer steps.
The default generator specs themselves live in `tools/t2i/registry.py`.
"""

from __future__ import annotations

# -- IPR: the IPR graph, `unveil refine`, `unveil evaluate ipr`, the SFT data builder and the GRPO reward renders --
IPR_GUIDANCE = 7.0  # authors' code (eval.py and vl_rl.py: `config.guidance_scale = 7.0`); paper: none
IPR_STEPS = 50  # authors' code (diffusers' pipeline default, never overridden there); paper: none
IPR_SIZE = 512  # ours: SD 1.4's native resolution (the paper's main generator); paper: none
IPR_T_MAX = 3  # paper, section 5: "up to three refinement steps" (authors' code: `num_iterations = 3`)
IPR_IMAGES_PER_PROMPT = 10  # paper, section 5: "averaged over 10 independent prompt refinements" (authors' code: 10)
REWARD_IMAGES_PER_PROMPT = 10  # authors' code (vl_rl.py: each refined prompt's reward averages 10 renders); paper: none

# -- CTD generation on Stable Diffusion (the TAG paper renders with GPT-Image-1: no sampler settings) --
CTD_GUIDANCE = 7.5  # diffusers: StableDiffusionPipeline's default guidance_scale
CTD_STEPS = 30  # ours: fewer than the pipeline's 50, enough for SD 1.5 candidates a panel then judges
CTD_SIZE = 512  # ours: SD 1.5's native resolution

# -- a GenerationRequest that names none (any backend, any caller) --
REQUEST_GUIDANCE = 7.5  # diffusers: StableDiffusionPipeline's default guidance_scale
REQUEST_STEPS = 50  # diffusers: StableDiffusionPipeline's default num_inference_steps
REQUEST_SIZE = 512  # diffusers: SD 1.x's default height and width
