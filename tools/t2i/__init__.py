"""Text-to-image generators that write their images into the content-addressed store."""

from tools.t2i.base import GenerationRequest, ImageGenerator

__all__ = ["GenerationRequest", "ImageGenerator"]
