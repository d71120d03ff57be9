"""The one fixed MTC reference of a detection evaluation's covertness bins (TAG paper Tables 1-3).

Covertness bins need one MTC per sample from one fixed reference, not from the detector being scored (a reference
that records its models is checked against the scored ones, with a warning): with its own MTC every toxic sample
below 0.8 was by construction found toxic by that detector, so its Low/Medium accuracy on toxic data is 1.0
whatever it does. The reference of a dataset is, in this order: a named run file (`mtc_from`, e.g. an earlier
TA-CTD run or `unveil detect` output: records with `id` and `mtc`); a reference detector (`mtc_reference`), run
once with TA-CTD into `runs/<dataset>/mtc-reference_*.jsonl` and reused for every method and model; else the
dataset's own `mtc` field (a CTD export carries the one its generation's reference detector assigned). Samples
without a reference MTC count only in `overall`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agents.spec import redact_spec
from evaluation.detection_configs import DetectionSettings, RunConfig, config_context, run_configs, run_identity
from evaluation.runs import slug, split_records
from runner.batch import BatchRun, run_batch
from runner.batch_input import BatchItem
from runner.detect import detect_one, detection_context
from tools.errors import UnveilError
from tools.jsonl_files import done_records


class MtcReferenceError(UnveilError, ValueError):
    """The MTC reference cannot be used (a missing run file, a run without MTC values)."""


def read_mtc_run(path: str | Path) -> dict[str, float]:
    """Per-sample MTC of a finished TA-CTD run file (records with `id` and a numeric `mtc`; failures skipped)."""
    p = Path(path)
    if not p.is_file():
        raise MtcReferenceError(f"--mtc-from {str(path)!r}: file not found")
    out = {
        sid: float(r["mtc"])
        for sid, r in done_records(p).items()
        if r.get("status", "ok") == "ok" and isinstance(r.get("mtc"), (int, float))
    }
    if not out:
        raise MtcReferenceError(f"--mtc-from {str(path)!r}: no record has an `mtc` value (is it a TA-CTD run?)")
    return out


def reference_config(dataset: str, settings: DetectionSettings) -> RunConfig:
    """The reference detector's TA-CTD run of a dataset (at the main depth)."""
    return RunConfig(dataset, settings.mtc_reference, "tag", settings.l_max)


def reference_file(cfg: RunConfig, out_dir: Path) -> Path:
    """Where the reference run is kept: apart from the scored runs, so it is never mistaken for one."""
    return out_dir / "runs" / slug(cfg.dataset) / f"mtc-reference_{slug(cfg.l_max, cfg.model)}.jsonl"


async def reference_mtc(
    dataset: str, items: list[BatchItem], settings: DetectionSettings, out_dir: Path
) -> tuple[dict[str, float], str]:
    """(per-sample reference MTC, a sentence naming its source) of one dataset; see the module docstring."""
    run_file = settings.mtc_from.get(dataset) or settings.mtc_from.get("")
    if run_file:
        ref = read_mtc_run(run_file)
        return {it.id: ref[it.id] for it in items if it.id in ref}, f"the run file {run_file}"
    if settings.mtc_reference:
        cfg = reference_config(dataset, settings)
        ctx = detection_context(
            "tag",
            {"model": cfg.model},
            image_store=settings.image_store,
            l_max=settings.l_max,
            k_max=settings.k_max,
            children=settings.children,
            announce=False,
            reading=settings.reading,
        )

        async def worker(sample_id: str, sample: dict[str, Any]) -> dict[str, Any]:
            return await detect_one(sample, ctx, "tag")

        path = reference_file(cfg, out_dir)
        await run_batch(
            items,
            worker,
            BatchRun(
                path,
                concurrency=settings.concurrency,
                retry_failed=settings.retry_failed,
                desc=f"{dataset}: MTC reference [{cfg.model}]",
                progress=settings.progress,
                identity=run_identity(ctx, "tag", settings),
                spending=settings.spending,
            ),
        )
        ok, _ = split_records(path, [it.id for it in items])
        return (
            {r["id"]: float(r["mtc"]) for r in ok if r.get("mtc") is not None},
            f"TA-CTD of the reference detector {cfg.model} at l_max={cfg.l_max}",
        )
    ref = {it.id: float(it.record["mtc"]) for it in items if it.record and it.record.get("mtc") is not None}
    return ref, "the dataset's `mtc` field"


def self_referenced(settings: DetectionSettings) -> list[str]:
    """Scored detectors whose TA-CTD rows the reference detector would bin by their own MTC (a biased table)."""
    if not settings.mtc_reference or "tag" not in settings.methods:
        return []
    return [m for m in settings.models if m == settings.mtc_reference]


def _spec_set(models: object) -> frozenset[str]:
    """The model specs a reference used: a record's `models` (role -> spec) or a single spec."""
    if isinstance(models, Mapping):
        return frozenset(redact_spec(str(v)) for v in models.values() if v)
    return frozenset({redact_spec(str(models))}) if models else frozenset()


def reference_models(dataset: str, items: list[BatchItem], settings: DetectionSettings) -> set[frozenset[str]]:
    """The model sets behind a dataset's reference MTC, where the source records them: the `models` of a run
    file's records (`mtc_from`), or the `mtc_reference` a CTD sample carries (its generation's reference detector).
    Empty for `mtc_reference` (checked by `self_referenced`) and for sources that record nothing."""
    run_file = settings.mtc_from.get(dataset) or settings.mtc_from.get("")
    if run_file:
        ids = {it.id for it in items}
        records = [r for sid, r in done_records(Path(run_file)).items() if sid in ids and r.get("mtc") is not None]
        return {_spec_set(r.get("models")) for r in records} - {frozenset()}
    if settings.mtc_reference:
        return set()
    out: set[frozenset[str]] = set()
    for it in items:
        ref = (it.record or {}).get("mtc_reference")
        if it.record and it.record.get("mtc") is not None and ref:
            out.add(_spec_set(ref.get("model") if isinstance(ref, Mapping) else ref))
    return out - {frozenset()}


def scored_by_reference(dataset: str, items: list[BatchItem], settings: DetectionSettings) -> list[str]:
    """Scored TA-CTD detectors whose own models produced the reference MTC of `--mtc-from RUN` or of the dataset's
    `mtc` field: their rows would be binned by their own MTC (the bias the module docstring describes)."""
    used = reference_models(dataset, items, settings)
    if not used:
        return []
    hits: list[str] = []
    for cfg in run_configs(dataset, settings):
        if cfg.method == "tag" and cfg.model not in hits and _spec_set(config_context(cfg, settings).models()) in used:
            hits.append(cfg.model)
    return hits
