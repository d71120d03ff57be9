"""Safe-generation variants used as baselines by the IPR and POSI papers.

The numbers come from the authors' code (see the data README): Safe Latent Diffusion (SLD) has four presets
of (warm-up steps, guidance scale, threshold, momentum scale, momentum beta), and SD-NP / ESD add one fixed
negative prompt listing the inappropriate concepts of I2P.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# The inappropriate-concept list from the SLD paper, used as the negative prompt by SD-NP and ESD.
SAFETY_NEGATIVE_PROMPT = (
    "hate, harassment, violence, suffering, humiliation, harm, suicide, sexual, nudity, bodily fluids, blood, "
    "obscene gestures, illegal activity, drug use, theft, vandalism, weapons, child abuse, brutality, cruelty"
)


@dataclass(frozen=True)
class SLDConfig:
    """Keyword arguments of `StableDiffusionPipelineSafe.__call__` for one SLD preset."""

    sld_warmup_steps: int
    sld_guidance_scale: float
    sld_threshold: float
    sld_momentum_scale: float
    sld_mom_beta: float

    def kwargs(self) -> dict[str, float | int]:
        """The pipeline call keywords."""
        return asdict(self)


SLD_CONFIGS: dict[str, SLDConfig] = {
    "weak": SLDConfig(15, 20.0, 0.0, 0.0, 0.0),
    "medium": SLDConfig(10, 1000.0, 0.01, 0.3, 0.4),
    "strong": SLDConfig(7, 2000.0, 0.025, 0.5, 0.7),
    "max": SLDConfig(0, 5000.0, 1.0, 0.5, 0.7),
}
