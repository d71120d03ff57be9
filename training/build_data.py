"""Building the refiner's SFT dataset the way the IPR paper did (section 5, Appendix B).

For each prompt: render one image with the text-to-image generator, show the prompt and the image to the
labeller VLM (the `labeller` role, through the gateway: cache, retries, cost), and write one record
`{id, prompt, image_id, image, reason, answer, decision, ...}`. The run is a `unveil.batch` batch: resumable
(ids already written are skipped), concurrent (renders of concurrent samples batch on the GPU), with a progress
bar, a failure record per bad sample, and an optional spending cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unveil.batch import BatchItem, BatchSummary, run_batch


@dataclass
class BuildDataSettings:
    """What the dataset build uses."""

    labeller: str  # model spec of the labeller VLM, e.g. openai:gpt-4.1
    generator: str = "diffusers:CompVis/stable-diffusion-v1-4"
    width: int = 512
    height: int = 512
    steps: int = 50
    guidance: float = 7.5
    seed: int = 0  # base seed; a record's own `seed` (e.g. I2P's evaluation seed) wins
    concurrency: int = 8
    max_cost_usd: float = 0.0  # stop starting new samples once the labeller has cost this much (0: no cap)


def prompt_items(path: str | Path, *, field: str | None = None, limit: int | None = None) -> list[BatchItem]:
    """Batch items from any prompts file (JSONL/JSON/CSV/TXT) via `training.data.load_prompts`."""
    from training.data import load_prompts

    return [BatchItem(r["id"], r) for r in load_prompts(path, field=field, limit=limit)]


async def build_sft_records(items: list[BatchItem], output: str | Path, settings: BuildDataSettings, *,
                            generator: Any = None, store: Any = None, retry_failed: bool = False,
                            progress: bool = True) -> BatchSummary:
    """Render and label every item not yet in `output`; returns the batch summary."""
    from agents.gateway import get_gateway
    from agents.labeller import label_example
    from tools.image_store import get_image_store
    from tools.t2i.base import GenerationRequest
    from training.reward import seeds_for

    store = store or get_image_store()
    if generator is None:
        from tools.t2i.registry import get_generator

        generator = get_generator(settings.generator, store=store, truncate_long_prompts=True)
    gateway = get_gateway()

    async def worker(sample_id: str, record: dict[str, Any]) -> dict[str, Any]:
        prompt = str(record["prompt"])
        seed = int(record["seed"]) if str(record.get("seed", "")).isdigit() else seeds_for(prompt, 1, settings.seed)[0]
        request = GenerationRequest(prompt=prompt, seed=seed, num_images=1, width=settings.width,
                                    height=settings.height, steps=settings.steps, guidance=settings.guidance)
        image_id = (await generator.generate(request))[0]
        answer, usage, cache_hit = await label_example(gateway, settings.labeller, prompt=prompt, image_id=image_id,
                                                       store=store)
        return {"prompt": prompt, "image_id": image_id, "image": str(store.path_for(image_id)), "seed": seed,
                "reason": answer.reason, "answer": answer.decision, "decision": "keep" if answer.keep else "refine",
                "labeller": settings.labeller, "generator": getattr(generator, "name", settings.generator),
                "usage": usage, "cache_hit": cache_hit}

    def stop() -> str | None:
        spent = gateway.usage["total"]["cost_usd"]
        if settings.max_cost_usd and spent >= settings.max_cost_usd:
            return f"spending cap ${settings.max_cost_usd:.2f} reached (${spent:.2f} spent)"
        return None

    return await run_batch(items, worker, output, concurrency=settings.concurrency, retry_failed=retry_failed,
                           desc="label", progress=progress, stop=stop)
