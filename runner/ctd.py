"""One CTD scene through the generation graph: run, resume from its checkpoint, or read back a finished one.

`unveil generate` runs its scenes with `run_scene` under the batch runner and shapes each record with
`runner.ctd_dataset.sample_record`; a distributed engine calls the same function. `complete_pair` then adds what
the TAG paper's evaluation needs to an accepted pair: its MTC from a fixed reference detector (TA-CTD through
`runner.detect.detect_one`, so the export carries the covertness bins of Tables 1-3) and, optionally, its benign
counterpart (Table 4, "with benign data").
"""

from __future__ import annotations

import asyncio
import errno
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphs.ctd import CtdContext, ctd_generator
from graphs.ctd.send_back import reviewer_feedback
from graphs.tag import TagContext
from runner.batch_input import BatchItem
from runner.detect import detect_one, tag_context, tag_reading
from tools.env import SettingError
from tools.safe_files import StorageError

if TYPE_CHECKING:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

# How long an operation on the scenes' checkpoints waits for another connection's write lock (SQLite's busy
# timeout) before "database is locked": a rerun, a send-back or another process that finds the file briefly locked
# by a writer waits for it instead of failing its scenes at once; the bound keeps a lock that is never released an
# error rather than a hang. (sqlite3's own default is 5 s, short for a machine under load.)
CHECKPOINT_BUSY_TIMEOUT_S = 30.0


def scene_items(category: str, n: int, *, scene: str | None, erase_routine: str | None, seed: int) -> list[BatchItem]:
    """Deterministic scene ids and seeds, so a rerun of the same command names the same scenes."""
    return [
        BatchItem(
            f"{category}-{i:05d}",
            {"category": category, "scene_hint": scene, "erase_routine": erase_routine, "seed": seed + 1000 * i},
        )
        for i in range(n)
    ]


def generation_settings(
    ctx: CtdContext, extras: PairExtras, *, scene: str | None, erase_routine: str | None, seed: int
) -> dict[str, Any]:
    """What makes a CTD dataset folder's records (its identity, see `runner.output_identity.OutputIdentity`):
    every role's model, the graph settings, the scene idea, erasure routine and base seed, and the pair extras. The
    category and the number of scenes are not among them (scene ids carry the category, and a rerun with a larger
    --n adds scenes made the same way), nor the near-duplicate threshold, a filter over the finished scenes."""
    from runner.context import context_settings
    from tools.redact import redact_secrets

    return {
        **context_settings(ctx),
        "scene": scene,
        "erase_routine": erase_routine,
        "seed": seed,
        "mtc_reference": redact_secrets(extras.mtc_reference),
        "mtc_l_max": extras.mtc_l_max,
        "benign_model": redact_secrets(extras.benign_model),
        # the reference's resolved TAG reading, only where there is a reference (older folders without one resume)
        **({"mtc_tag_reading": tag_reading(reference_context(extras))} if extras.mtc_reference else {}),
    }


async def run_scene(
    graph: Any, sample_id: str, record: dict[str, Any], ctx: CtdContext, *, thread_prefix: str = "ctd"
) -> dict[str, Any]:
    """Run (or resume, or read back) one scene's thread; returns the graph's final values."""
    config: Any = {"configurable": {"thread_id": f"{thread_prefix}:{sample_id}"}}
    snapshot = await graph.aget_state(config)
    if snapshot.values and not snapshot.next and snapshot.values.get("status"):
        return dict(snapshot.values)  # finished before a kill, but its record was never written
    if snapshot.next:
        await graph.ainvoke(None, config, context=ctx)  # resume from the last checkpoint
    else:
        await graph.ainvoke({"id": sample_id, **record}, config, context=ctx)
    final = await graph.aget_state(config)
    if final.next:
        raise RuntimeError(f"scene {sample_id} stopped at {final.next} (an interrupt needs review mode interrupt)")
    return dict(final.values)


async def send_back_scene(
    graph: Any, sample_id: str, send_back: dict[str, Any], ctx: CtdContext, *, thread_prefix: str = "ctd"
) -> dict[str, Any]:
    """Give the Eraser another attempt at a scene a reviewer sent back: the scene's finished thread is continued
    from a new checkpoint written as the `feedback` node (its history plus the reviewer's note), so the graph runs
    eraser -> checks -> judges -> gatekeeper again with every earlier attempt, from where the scene stopped; no
    earlier call is repeated. Returns the graph's final values. A scene without its thread in the folder's
    checkpoints (a Studio sample, a copied folder) is a ValueError."""
    config: Any = {"configurable": {"thread_id": f"{thread_prefix}:{sample_id}"}}
    snapshot = await graph.aget_state(config)
    values = dict(snapshot.values or {})
    if not values.get("erasure") or snapshot.next:
        raise SettingError(
            f"scene {sample_id}: no finished run in this folder's checkpoints to send back to the Eraser"
        )
    history = [*values.get("feedback_history", []), reviewer_feedback(values, send_back)]
    await graph.aupdate_state(config, {"feedback_history": history}, as_node="feedback")
    await graph.ainvoke(None, config, context=ctx)
    final = await graph.aget_state(config)
    if final.next:
        raise RuntimeError(f"scene {sample_id} stopped at {final.next} (an interrupt needs review mode interrupt)")
    return dict(final.values)


async def preflight_t2i(ctx: CtdContext) -> None:
    """Load the text-to-image pipeline once before any scene starts, so a missing model is one clear error
    instead of a failure per scene (raises ValueError naming the spec)."""
    try:
        generator = await asyncio.to_thread(ctd_generator, ctx)
        if isinstance(getattr(type(generator), "pipeline", None), property):
            await asyncio.to_thread(getattr, generator, "pipeline")
    except Exception as exc:
        raise SettingError(f"generator {ctx.generator}: the text-to-image model cannot be used: {exc}") from exc


@dataclass(frozen=True)
class PairExtras:
    """What the run layer adds to each accepted pair after the graph (both off by default)."""

    mtc_reference: str = ""  # detector spec whose TA-CTD MTC the sample records (empty: none)
    mtc_l_max: int | None = None  # its depth (None: the detection default, 4)
    benign_model: str = ""  # spec of the benign_rewriter role (empty: no benign counterpart)
    # its TAG readings as `runner.detect.detection_context` takes them (prune, roots_mode; absent: the defaults)
    mtc_reading: tuple[tuple[str, str], ...] = ()

    @property
    def active(self) -> bool:
        """Whether anything is added."""
        return bool(self.mtc_reference or self.benign_model)


def reference_context(extras: PairExtras, image_store: str = "") -> TagContext:
    """The TAG context of the MTC reference detector (depth and readings from `extras`)."""
    settings: dict[str, Any] = {"model": extras.mtc_reference, **dict(extras.mtc_reading)}
    if image_store:
        settings["image_store"] = image_store
    if extras.mtc_l_max is not None:
        settings["l_max"] = extras.mtc_l_max
    return tag_context(settings, announce=False)


async def reference_mtc(rec: dict[str, Any], dataset_dir: Path, extras: PairExtras) -> dict[str, Any]:
    """The reference detector's TA-CTD run on an accepted pair: {mtc, mtc_reference, usage}; `mtc_reference`
    records the model and the TAG reading (prune, roots_mode, l_max, k_max, children) that gave the MTC."""
    ctx = reference_context(extras, str(dataset_dir / "images"))
    sample = {
        "image": str(dataset_dir / rec["image"]),
        "text": rec["text"],
        "image_description": rec.get("image_description"),
        "base_dir": str(dataset_dir),
    }
    out = await detect_one(sample, ctx, "tag")
    return {
        "mtc": out.get("mtc"),
        "usage": out.get("usage"),
        "mtc_reference": {
            "model": extras.mtc_reference,
            "method": "tag",
            **(tag_reading(ctx) or {}),
            "toxic": bool(out.get("toxic")),
        },
    }


async def benign_counterpart(rec: dict[str, Any], extras: PairExtras) -> dict[str, Any]:
    """The benign counterpart of an accepted pair: {benign: {id, text, removed_cue, model}, usage}."""
    from agents.ctd.benign import write_benign_text
    from agents.gateway import get_gateway

    res = await write_benign_text(
        get_gateway(),
        extras.benign_model,
        text=rec["text"],
        image_description=rec.get("image_description"),
        category=rec.get("category"),
        erasure_reason=rec.get("erasure_reason"),
    )
    benign = {
        "id": benign_id(str(rec["id"])),
        "text": res.value.text,
        "removed_cue": res.value.removed_cue,
        "model": extras.benign_model,
    }
    return {"benign": benign, "usage": res.usage}


def benign_id(sample_id: str) -> str:
    """The id of a sample's benign counterpart in the dataset and the export."""
    return f"{sample_id}-benign"


async def complete_pair(rec: dict[str, Any], dataset_dir: str | Path, extras: PairExtras) -> dict[str, Any]:
    """An accepted (or pending) sample record with its reference MTC and benign counterpart added, their model
    usage merged into the record's (so spending caps count them); other records come back unchanged."""
    from agents.usage import merge_usage

    if not extras.active or rec.get("status") not in ("accepted", "pending_review") or not rec.get("image"):
        return rec
    root = Path(dataset_dir)
    out = dict(rec)
    jobs = []
    if extras.mtc_reference:
        jobs.append(reference_mtc(out, root, extras))
    if extras.benign_model:
        jobs.append(benign_counterpart(out, extras))
    usage = out.get("usage") or None
    for part in await asyncio.gather(*jobs):
        usage = merge_usage(usage, part.pop("usage", None))
        out.update(part)
    out["usage"] = usage
    out["cost_usd"] = float(((usage or {}).get("total") or {}).get("cost_usd", 0.0))
    return out


@asynccontextmanager
async def scene_checkpoints(path: Path) -> AsyncIterator[AsyncSqliteSaver]:
    """The scenes' LangGraph checkpoint saver on the SQLite file `path`, closed only once no operation is left
    half-done on it, so no lock of this run outlives it.

    Why: LangGraph writes a scene's checkpoints from tasks of its own, and a scene cancelled while one of them runs
    (the batch cancels the other scenes when one stops the run, e.g. on a full disk) ends without waiting for it.
    Closing the connection under such a write (its INSERT run, its COMMIT not yet) leaves the closed connection
    holding SQLite's write lock until Python collects the write's cursor: a rerun in the same process, a Studio or
    another process then gets "database is locked". So the close takes the saver's lock, which every operation
    holds from its first statement to its commit, rolls back what a cancelled operation left uncommitted, and
    closes while holding it: an operation still waiting for the lock then finds the connection closed before it
    runs a statement."""
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with aiosqlite.connect(str(path), timeout=CHECKPOINT_BUSY_TIMEOUT_S) as conn:
        saver = AsyncSqliteSaver(conn)
        try:
            yield saver
        finally:
            async with saver.lock:
                if conn.in_transaction:
                    await conn.rollback()
                await conn.close()


def checkpoint_error(path: Path, exc: sqlite3.OperationalError) -> StorageError | None:
    """A checkpoint database that cannot be written (SQLite's "database or disk is full", an I/O error) ends the
    run as one `StorageError` naming it, as a full samples file or image store does, rather than failing every
    scene with SQLite's words; any other SQLite error is the scene's own."""
    full = getattr(exc, "sqlite_errorname", "") in ("SQLITE_FULL", "SQLITE_IOERR") or any(
        words in str(exc) for words in ("disk is full", "disk I/O error")
    )
    if not full:
        return None
    return StorageError(
        errno.ENOSPC, f"the scenes' checkpoints cannot be written ({exc}); free space and rerun to resume", str(path)
    )
