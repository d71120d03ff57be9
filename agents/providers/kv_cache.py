"""A key/value cache for transformers' `generate` that grows by doubling instead of by concatenation.

transformers' `DynamicCache` appends each new token's keys and values with `torch.cat`, which copies the whole cache
of every layer at every decoding step. On CPU that copy is about a tenth of a step of the embedded 135M model at the
demo's prompt lengths (94 against 104 CPU-ms a step after a 700-token prompt; docs/install.md), and it grows with the
prompt. `growing_cache` gives a `DynamicCache` whose layers keep their keys and values in buffers with room to spare,
write the new rows in place and hand attention a view of the filled rows: the same values in the same layout, so
every logit is bit for bit what transformers' own cache gives (`tests/agents/test_kv_cache.py`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedConfig


def growing_cache(config: PreTrainedConfig) -> object | None:
    """A `DynamicCache` whose full-attention layers grow in place, for a model of `config`; None where this
    transformers has no per-layer caches (before 4.56): `generate` then builds its own `DynamicCache`."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:  # transformers before the layered caches: its default cache is used
        return None
    cache = DynamicCache(config=config)
    # Only plain full-attention layers grow in place; a sliding-window or other layer keeps transformers' own class.
    cache.layers = [_growing_layer_class()() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


@functools.cache
def _growing_layer_class() -> type[Any]:
    """The `DynamicLayer` subclass that grows in place (defined on first use: transformers is imported late)."""
    return _define_growing_layer()


def _define_growing_layer() -> type[Any]:
    import torch
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):  # type: ignore[no-untyped-call]  # transformers' __init_subclass__
        """One layer's keys and values in buffers with room to spare; `keys`/`values` are views of the filled rows."""

        _view: torch.Tensor | None = None  # the `keys` this layer handed out last
        _kbuf: torch.Tensor
        _vbuf: torch.Tensor

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            """Write the new rows in place (growing the buffers by doubling when full) and return the filled views."""
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            keys, values = self.keys, self.values
            assert keys is not None and values is not None  # set by lazy_initialization
            if self._view is not keys:
                # The first call, or transformers replaced `keys` (crop, reorder, reset): grow from what it holds.
                self._kbuf, self._vbuf = keys, values
            used = keys.shape[-2] if keys.numel() else 0
            need = used + key_states.shape[-2]
            if self._kbuf.numel() == 0 or need > self._kbuf.shape[-2]:
                # The prompt's buffer is exactly its size (as `torch.cat` makes it); decoding then doubles it.
                self._kbuf = _grown(self._kbuf, key_states, used, need)
                self._vbuf = _grown(self._vbuf, value_states, used, need)
            self._kbuf[..., used:need, :] = key_states
            self._vbuf[..., used:need, :] = value_states
            self.keys, self.values = self._kbuf[..., :need, :], self._vbuf[..., :need, :]
            self._view = self.keys
            return self.keys, self.values

    def _grown(old: torch.Tensor, new: torch.Tensor, used: int, need: int) -> torch.Tensor:
        buf = new.new_empty((*new.shape[:-2], max(need, 2 * used), new.shape[-1]))
        if used:
            buf[..., :used, :] = old[..., :used, :]
        return buf

    return GrowingLayer
