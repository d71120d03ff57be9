"""Building the refiner's SFT dataset the way the IPR paper did (section 5, Appendix B).

For each prompt: render one image with the text-to-image generator, show the prompt and the image to the
labeller VLM (the `labeller` role, through the gateway: cache, retries, cost), and write one record
`{id, prompt, image_id, image, reason, answer, decision, ...}`. The run is a `runner.batch` batch: resumable
(ids already written are skipped), concurrent (renders of concurrent samples batch on the GPU), with a progress
bar, a failure record per bad sample, and an optional spending cap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.batch import BatchRun, BatchSummary, run_batch
from runner.batch_input import BatchItem
from runner.output_identity import OutputIdentity
from tools.env import SettingError
from tools.t2i.registry import DEFAULT_IPR_GENERATOR
from tools.t2i.settings import RenderSettings

if TYPE_CHECKING:
    from agents.gateway import Gateway
    from tools.image_store import ImageStore
    from tools.t2i.base import ImageGenerator


@dataclass
class BuildDataSettings(RenderSettings):
    """What the dataset build uses. The image the labeller sees is rendered as the IPR graph and the evaluation
    render it: the render fields of `tools.t2i.settings.RenderSettings`, under the same names and defaults."""

    labeller: str  # model spec of the labeller VLM, e.g. openai:gpt-4.1
    generator: str = DEFAULT_IPR_GENERATOR
    seed: int = 0  # base seed; a record's own `seed` or I2P's `evaluation_seed` wins
    concurrency: int = 8
    max_cost_usd: float = 0.0  # stop starting new samples once the labeller has cost this much (0: no cap)
    allow_demo_labeller: bool = False  # label with the embedded demo model anyway (a pipeline check, not data)

    def __post_init__(self) -> None:
        from agents.labeller import PAPER_TEACHER
        from agents.providers.profiles import is_demo_spec

        if is_demo_spec(self.labeller) and not self.allow_demo_labeller:
            raise SettingError(
                f"labeller {self.labeller!r} is the embedded 135M demonstration model: its labels would be noise, "
                f"and the IPR paper's teacher is GPT-4.1. Choose a strong vision model (e.g. --labeller "
                f"{PAPER_TEACHER}), or pass --allow-demo-labeller to check the pipeline only"
            )


MAX_PROMPT_CHARS = 2000  # the IPR graph's default max_prompt_chars


def prompt_items(path: str | Path, *, field: str | None = None, limit: int | None = None) -> list[BatchItem]:
    """Batch items from any prompts file (JSONL/JSON/CSV/TXT) via `training.data.load_prompts`.

    A JSONL file goes through the batch reader first, so a bad line (not UTF-8, not JSON, not an object) or a
    repeated id becomes a failed item naming the line instead of stopping the whole file; in any format a
    repeated id is a failed item, never a second record under the same id.
    """
    from training.data import PROMPT_FIELDS, load_prompts, prompts_from_records

    p = Path(path)
    if p.suffix.lower() == ".jsonl":
        from runner.batch_input import read_jsonl

        bad = []
        good: list[dict[str, Any]] = []
        for n, it in enumerate(read_jsonl(p)):
            if it.error:
                bad.append(it)
            else:  # records without an id keep load_prompts' position ids
                good.append({**(it.record or {}), "id": it.id if "id" in (it.record or {}) else str(n)})
        items = list(bad)
        for rec in good:
            if limit is not None and len(items) - len(bad) >= limit:
                break
            rows = prompts_from_records([rec], field=field)
            if not rows:
                fields = field or " or ".join(PROMPT_FIELDS)
                items.append(
                    BatchItem(rec["id"], None, f"{p.name} id {rec['id']!r}: {fields}: expected a non-empty string")
                )
            else:
                items.append(BatchItem(rec["id"], rows[0]))
        return [_checked(it, p.name) for it in items]
    out: list[BatchItem] = []
    seen: set[str] = set()
    for r in load_prompts(path, field=field, limit=limit):
        if r["id"] in seen:
            out.append(BatchItem(f"{r['id']}#dup-{len(out)}", None, f"{p.name}: duplicate id {r['id']!r}"))
            continue
        seen.add(r["id"])
        out.append(_checked(BatchItem(r["id"], r), p.name))
    return out


def _checked(item: BatchItem, source: str) -> BatchItem:
    """A prompt longer than MAX_PROMPT_CHARS becomes a failed item (it would be truncated by the text encoder and
    cost the labeller dearly)."""
    prompt = (item.record or {}).get("prompt")
    if isinstance(prompt, str) and len(prompt) > MAX_PROMPT_CHARS:
        return BatchItem(
            item.id,
            None,
            f"{source} id {item.id!r}: prompt: {len(prompt)} characters is over the {MAX_PROMPT_CHARS}-character limit",
        )
    return item


async def label_record(
    record: dict[str, Any],
    *,
    settings: BuildDataSettings,
    generator: ImageGenerator,
    gateway: Gateway,
    store: ImageStore,
) -> dict[str, Any]:
    """Render the record's prompt once and have the labeller judge it: one SFT record (before the batch's id)."""
    from agents.labeller import label_example
    from runner.refine import seed_of
    from training.reward import seeds_for

    prompt = str(record["prompt"])
    # The record's own seed (`seed`, or I2P's `evaluation_seed`, read as `unveil refine` reads them), so the
    # labeller sees the image the evaluation renders; a seed that is not an integer fails the sample by name.
    own = seed_of(record)
    seed = own if own is not None else seeds_for(prompt, 1, settings.seed)[0]
    request = settings.request(prompt, seed=seed)
    image_id = (await generator.generate(request))[0]
    answer, usage, cache_hit = await label_example(
        gateway, settings.labeller, prompt=prompt, image_id=image_id, store=store
    )
    return {
        "prompt": prompt,
        "image_id": image_id,
        "image": str(store.path_for(image_id)),
        "seed": seed,
        "reason": answer.reason,
        "answer": answer.decision,
        "decision": "keep" if answer.keep else "refine",
        "labeller": settings.labeller,
        "generator": getattr(generator, "name", settings.generator),
        "usage": usage,
        "cache_hit": cache_hit,
    }


def spending_cap(settings: BuildDataSettings, gateway: Gateway) -> Callable[[], str | None]:
    """The batch's stop check: why to start no new sample once the gateway has spent `max_cost_usd` (0: never)."""

    def stop() -> str | None:
        spent = gateway.usage["total"]["cost_usd"]
        if settings.max_cost_usd and spent >= settings.max_cost_usd:
            return f"spending cap ${settings.max_cost_usd:.2f} reached (${spent:.2f} spent)"
        return None

    return stop


async def build_sft_records(
    items: list[BatchItem],
    output: str | Path,
    settings: BuildDataSettings,
    *,
    generator: ImageGenerator | None = None,
    store: ImageStore | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    identity: OutputIdentity | None = None,
    inputs: tuple[str | Path, ...] = (),
) -> BatchSummary:
    """Render and label every item not yet in `output`; returns the batch summary. `identity` and `inputs` are
    `runner.batch.run_batch`'s (what makes the output; files the output may not be)."""
    from agents.gateway import get_gateway
    from tools.image_store import get_image_store

    # 1. The image store, the generator and the gateway (built from settings unless given)
    image_store = store or get_image_store()
    t2i = generator
    if t2i is None:
        from tools.t2i.registry import open_generator

        t2i = open_generator(settings.generator, store=image_store, long_prompts=settings.long_prompts)
    gateway = get_gateway()

    async def worker(sample_id: str, record: dict[str, Any]) -> dict[str, Any]:
        return await label_record(record, settings=settings, generator=t2i, gateway=gateway, store=image_store)

    # 2. Render and label each item, resumably, until done or the spending cap
    return await run_batch(
        items,
        worker,
        BatchRun(
            Path(output),
            concurrency=settings.concurrency,
            retry_failed=retry_failed,
            desc="label",
            progress=progress,
            stop=spending_cap(settings, gateway),
            identity=identity,
            inputs=inputs,
        ),
    )


def build_data_settings(settings: BuildDataSettings) -> dict[str, Any]:
    """What makes a build-data output's records (its identity): the labeller, generator, base seed and render
    settings (not concurrency or the spending cap)."""
    from tools.redact import redact_secrets

    return {
        "labeller": redact_secrets(settings.labeller),
        "generator": redact_secrets(settings.generator),
        "seed": settings.seed,
        **settings.render_settings(),
    }
