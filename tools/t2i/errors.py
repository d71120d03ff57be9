"""Errors raised by text-to-image backends; every message names the input or setting at fault."""

from __future__ import annotations

from tools.errors import UnveilError


class T2IError(UnveilError, RuntimeError):
    """Base class for text-to-image failures."""


class ModelNotFoundError(T2IError):
    """A model id or folder could not be found or loaded (offline cache miss, wrong path, missing weights)."""


class GenerationOOMError(T2IError):
    """The accelerator ran out of memory; the message names the batch size and image settings that caused it."""

    def __init__(self, message: str, *, batch_size: int):
        super().__init__(message)
        self.batch_size = batch_size


class UnsupportedOptionError(T2IError, ValueError):
    """An option or request field that the chosen backend cannot honour."""


class PromptError(UnveilError, ValueError):
    """A prompt was refused before generation (empty, not text, or over the tokenizer limit)."""
