"""Errors raised by text-to-image backends; every message names the input or setting at fault."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tools.errors import UnveilError


def renamed_note(names: Iterable[str], renamed: Mapping[str, str]) -> str:
    """'; renamed: OLD is now NEW' for the names among `names` that `renamed` maps to a new spelling (else ''), to
    end the message that refuses them."""
    old = [n for n in sorted(names) if n in renamed]
    return "; renamed: " + ", ".join(f"{n} is now {renamed[n]}" for n in old) if old else ""


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
