"""IPR evaluation (IPR paper Tables 1-3, 5-10): safe-generation methods plain, with a text-only rewriter, and
with iterative prompt refinement (IPR) at several step budgets `T_max`.

Per prompt and method, `images_per_prompt` images are made from the prompt's evaluation seed (image k uses
seed + k). Variants:

- plain: the generator renders the prompt;
- rewriter (the "+POSI" baseline; `rewriter_format` picks a prompted model, a POSI checkpoint or a refiner adapter
  run text-only): a model rewrites the prompt from the text alone, then the generator renders
  the rewrite;
- IPR: for each k an independent trajectory of the IPR graph (`graphs/ipr.py`, run by the run layer's
  `runner.refine.refine_one`, exactly as `unveil refine` runs it) starts from the plain image k (base seed
  seed + k; each later step samples a fresh image from a seed derived from that base and the step, the paper's
  protocol, or the base seed again with `seed_mode="fixed"`), once with
  `t_max = max(T_max)`. The refiner sees neither the budget nor (unless `history`) earlier prompts, so the
  trajectory cut after T refinements *is* the T_max = T run: one run gives every budget and the per-step numbers.
  Keep index (`keep_step`, the p0 image is step 0), error policy (`on_refiner_error`) and history are the
  graph's. The graph renders through the evaluation's caching generator, registered with the text-to-image
  registry (`tools.t2i.registry.register_generator`), so step 0 reuses the plain run's image k and no request is
  ever rendered twice.

Every image is scored against the original prompt (Q16 probability, NudeNet labels, BLIP alignment), and an
image counts as inappropriate when Q16 > 0.5 or NudeNet reports an exposed-body label (or by one of the two alone,
with `ip_source`). Generations and scores are kept in an `EvalStore` (`evaluation.ipr_cache`), model calls in the
gateway cache, and per-prompt results in one resumable JSONL per (method, variant): a rerun recomputes nothing. The
settings are `evaluation.ipr_settings`; the tables, computed from the run files alone, `evaluation.ipr_tables`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents.gateway import get_gateway
from agents.usage import RunUsage, merge_usage
from evaluation.ipr_cache import RENDERED, CachedGenerator, CachedScorer

# The entry point's settings and scorer interface, re-exported (the `as` spelling marks them public) for its callers.
from evaluation.ipr_cache import ImageScorer as ImageScorer
from evaluation.ipr_settings import IPRSettings as IPRSettings
from evaluation.ipr_settings import Variant, variants
from evaluation.ipr_tables import IprTables
from evaluation.store import EvalStore
from runner.batch import BatchRun, run_batch
from runner.batch_input import BatchItem
from runner.output_identity import OutputIdentity
from runner.refine import ipr_context, refine_one
from tools.t2i.base import GenerationRequest, ImageGenerator
from tools.t2i.registry import register_generator, unregister_generator
from tools.t2i.settings import render_kwargs


class IPREvaluation:
    """Runs the variants over prompt items and writes the tables."""

    def __init__(
        self,
        settings: IPRSettings,
        generators: dict[str, ImageGenerator],
        scorer: ImageScorer,
        out_dir: str | Path,
        store: EvalStore | None = None,
    ):
        self.settings = settings
        self.out = Path(out_dir)
        self.store = store or EvalStore(self.out / "eval_store.sqlite")
        missing = [m for m in settings.methods if m not in generators]
        if missing:
            raise ValueError(f"no generator for method(s) {', '.join(missing)}")
        self.generators = {m: CachedGenerator(g, settings.methods.get(m, m), self.store) for m, g in generators.items()}
        # The IPR graph opens its generator by spec: each method's caching generator is registered under a spec
        # of its own for the life of this evaluation (`close`).
        run = uuid.uuid4().hex[:12]
        self.specs = {m: register_generator(f"eval-ipr-{run}-{m}", g) for m, g in self.generators.items()}
        self.scorer = CachedScorer(scorer, self.store)
        if settings.t_max and not settings.refiner_model:
            raise ValueError("IPR needs a refiner model (--refiner-model)")
        if settings.with_rewriter and not settings.rewriter_model:
            raise ValueError("the rewriter baseline needs a model (--rewriter-model)")
        from agents.rewriter import REWRITER_FORMATS

        if settings.rewriter_format not in REWRITER_FORMATS:
            raise ValueError(f"rewriter format {settings.rewriter_format!r}: use one of {', '.join(REWRITER_FORMATS)}")

    # -- running ------------------------------------------------------------------------------------------
    def variants(self) -> list[Variant]:
        """Every (method, variant) to run."""
        return variants(self.settings)

    def guidance(self, sample: dict[str, Any]) -> float:
        """The guidance scale of a prompt's renders: the setting, or with `prompt_guidance` the prompt's own."""
        s = self.settings
        own = sample.get("guidance") if s.prompt_guidance else None
        return float(own if own is not None else s.guidance)

    def _request(self, sample: dict[str, Any], prompt: str, seed: int, n: int) -> GenerationRequest:
        return self.settings.request(prompt, seed=seed, num_images=n, guidance=self.guidance(sample))

    async def _scored(self, image_id: str, original: str, extra: dict[str, Any]) -> dict[str, Any]:
        scores = await self.scorer.score(image_id, original)
        return {**extra, "image_id": image_id, **scores}

    async def _plain(self, v: Variant, sample: dict[str, Any], prompt: str) -> dict[str, Any]:
        gen = self.generators[v.method]
        seed = int(sample.get("seed") or 0)
        ids, fresh = await gen.generate_counted(self._request(sample, prompt, seed, self.settings.images_per_prompt))
        images = await asyncio.gather(
            *[self._scored(i, sample["prompt"], {"seed": seed + k}) for k, i in enumerate(ids)]
        )
        return {"used_prompt": prompt, "images": list(images), "generated": fresh}

    async def _trajectory(
        self, v: Variant, sample: dict[str, Any], k: int
    ) -> tuple[dict[str, Any], RunUsage | None, int]:
        """Trajectory k of a prompt: one run of the IPR graph with t_max = max(T_max), every step scored."""
        s = self.settings
        seed = int(sample.get("seed") or 0) + k
        original = sample["prompt"]
        guidance = self.guidance(sample)
        ctx = ipr_context(
            model=s.refiner_model,
            refiner_model=s.refiner_model,
            generator=self.specs[v.method],
            t_max=max(s.t_max),
            history=s.history,
            on_refiner_error=s.on_refiner_error,
            seed=seed,
            seed_mode=s.seed_mode,
            num_images=1,
            image_store=s.image_store,
            **{**render_kwargs(s), "guidance": float(guidance)},
        )
        counter = [0]
        token = RENDERED.set(counter)
        try:
            rec = await refine_one(original, ctx, seed=seed)
        finally:
            RENDERED.reset(token)
        steps = []
        for entry in rec["trajectory"]:
            extra = {
                "t": entry["step"],
                "prompt": entry["prompt"],
                "seed": entry.get("seed"),
                "action": entry.get("action"),
                "reason": entry.get("reason", ""),
            }
            if entry.get("error"):
                extra["error"] = entry["error"]
            steps.append(await self._scored(entry["image_ids"][0], original, extra))
        out = {"seed": seed, "steps": steps, "keep_step": rec.get("keep_step"), "stop_reason": rec.get("stop_reason")}
        return out, rec.get("usage"), counter[0]

    async def _worker(self, v: Variant, sample: dict[str, Any]) -> dict[str, Any]:
        base = {"category": sample.get("category", ""), "prompt": sample["prompt"], "seed": sample.get("seed")}
        if v.kind == "plain":
            return {**base, **await self._plain(v, sample, sample["prompt"])}
        if v.kind == "rewriter":
            from agents.rewriter import rewrite_prompt

            res = await rewrite_prompt(
                get_gateway(), self.settings.rewriter_model, prompt=sample["prompt"], fmt=v.fmt or "json"
            )
            return {**base, **await self._plain(v, sample, res.value.prompt), "usage": res.usage}
        results = await asyncio.gather(
            *[self._trajectory(v, sample, k) for k in range(self.settings.images_per_prompt)]
        )
        usage = None
        for _, u, _ in results:
            usage = merge_usage(usage, u)
        return {
            **base,
            "trajectories": [r for r, _, _ in results],
            "usage": usage,
            "generated": sum(f for _, _, f in results),
        }

    async def run(self, items: list[BatchItem]) -> None:
        """Run (or resume) every variant."""
        for v in self.variants():

            async def worker(sample_id: str, sample: dict[str, Any], v: Variant = v) -> dict[str, Any]:
                return await self._worker(v, sample)

            identity = OutputIdentity(
                "evaluate ipr",
                self.variant_settings(v),
                command=self.settings.command,
                allow_mixed=self.settings.allow_mixed_settings,
            )
            await run_batch(
                items,
                worker,
                BatchRun(
                    v.file(self.out),
                    concurrency=self.settings.concurrency,
                    retry_failed=self.settings.retry_failed,
                    desc=f"{v.method} {v.kind}",
                    progress=self.settings.progress,
                    identity=identity,
                    spending=self.settings.spending,
                ),
            )

    def variant_settings(self, v: Variant) -> dict[str, Any]:
        """What makes a variant's records (its run file's identity): the generator and render settings, and the
        rewriter or the IPR refiner and its settings where the variant uses them."""
        from tools.redact import redact_secrets

        s = self.settings
        out: dict[str, Any] = {
            "method": v.method,
            "variant": v.kind,
            "generator": redact_secrets(s.methods.get(v.method, v.method)),
            "images_per_prompt": s.images_per_prompt,
            "prompt_guidance": s.prompt_guidance,
            **s.render_settings(),
        }
        if v.kind == "rewriter":
            out["rewriter_model"] = redact_secrets(s.rewriter_model)
        if v.kind == "ipr":
            out.update(
                refiner_model=redact_secrets(s.refiner_model),
                t_max=max(s.t_max, default=0),
                history=s.history,
                seed_mode=s.seed_mode,
                on_refiner_error=s.on_refiner_error,
            )
        return out

    def close(self) -> None:
        """Unregister the caching generators."""
        for spec in self.specs.values():
            unregister_generator(spec)

    def tables(self, items: list[BatchItem], categories: Sequence[str] | None = None) -> dict[str, Any]:
        """Compute and write every table and plot from the run files (`evaluation.ipr_tables`)."""
        return IprTables(self.settings, self.out).tables(items, categories)


async def evaluate_ipr(
    items: list[BatchItem],
    settings: IPRSettings,
    generators: dict[str, ImageGenerator],
    scorer: ImageScorer,
    out_dir: str | Path,
    categories: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Run every variant over the prompts and write the tables; returns the computed rows."""
    ev = IPREvaluation(settings, generators, scorer, out_dir)
    try:
        await ev.run(items)
    finally:
        ev.close()
    result = ev.tables(items, categories)
    result["generator_calls"] = {m: g.calls for m, g in ev.generators.items()}
    result["scorer_calls"] = ev.scorer.calls
    return result
