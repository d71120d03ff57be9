"""Compiled-artefact files in torch's own format (`torch.compiler.save_cache_artifacts`), with the entries a test
chooses: `(kind, key, content)`, kind one of torch's artefact types (`autotune`, `inductor`, `aot_autograd`, `pgo`,
`precompile`)."""

from __future__ import annotations


def artefact_file(*entries: tuple[str, str, bytes]) -> bytes:
    """The bytes torch's serializer writes for `entries` (what `load_cache_artifacts` takes)."""
    from torch.compiler._cache import CacheArtifactFactory, CacheArtifactManager, _serialize_single_cache
    from torch.utils._appending_byte_serializer import AppendingByteSerializer

    CacheArtifactManager._ensure_cache_artifacts_registered()
    by_kind: dict[str, list[object]] = {}
    for kind, key, content in entries:
        by_kind.setdefault(kind, []).append(CacheArtifactFactory.create(kind, key, content))
    writer = AppendingByteSerializer(serialize_fn=_serialize_single_cache)
    writer.extend(by_kind.items())  # type: ignore[arg-type]
    return writer.to_bytes()


def artefact_kinds() -> list[str]:
    """Every artefact type this torch registers."""
    from torch.compiler._cache import CacheArtifactFactory, CacheArtifactManager

    CacheArtifactManager._ensure_cache_artifacts_registered()
    return sorted(CacheArtifactFactory._artifact_types)
