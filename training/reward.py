"""The GRPO reward of the IPR refiner: the single-generation surrogate of section 4.3 of the IPR paper.

For an original prompt p0 shown with its current image i, a refiner answer is scored as
- `keep`: the bonus `alpha` (the image stays, so R(p0, i') - R(p0, i) vanishes);
- a refined prompt p': p' is rendered to `images_per_prompt` images i'_k and the answer earns
  mean_k R(p0, i'_k) - R(p0, i);
- an answer that cannot be parsed: `invalid_reward`.

The outcome reward R(p0, i) = w_toxic * (1 - Q16(i)) + beta * cos_CLIP(p0, i) comes in two named scales:
`paper` (w_toxic = 1, the formula printed in the paper) and `authors` (w_toxic = 5, beta = 1, what the
authors' code computes). `alpha` is a threshold in the units of R, so the same alpha = 0.3 asks for a much
larger expected gain under `paper` (a third of the whole toxicity range) than under `authors`.

Rendering and scoring sit behind two small protocols (`Renderer`, `Scorer`) so the reward is exact on fixed
scores in tests and runs on the batched generator and the CLIP/Q16 scorers in training.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from PIL import Image

from tools.env import SettingError
from tools.image_store import ImageStore
from tools.scorers.pixels import to_pil
from tools.t2i.defaults import REWARD_IMAGES_PER_PROMPT
from training.answers import Decision, parse_decision
from training.fields import setting


@dataclass(frozen=True)
class RewardScale:
    """How the toxicity and alignment terms are weighted in R(p0, i)."""

    name: str
    toxic_weight: float
    description: str


SCALES: dict[str, RewardScale] = {
    "paper": RewardScale("paper", 1.0, "(1 - Q16) + beta * CLIP cosine, as printed in the IPR paper"),
    "authors": RewardScale(
        "authors", 5.0, "5 * (1 - Q16) + beta * CLIP cosine (beta = 1), as the authors' code computes it"
    ),
}


@dataclass
class RewardSettings:
    """Settings of the refinement reward."""

    scale: Literal["paper", "authors"] = setting("paper", "paper: R in [0, 1 + beta]; authors: their code's scaling")
    beta: float = setting(1.0, "weight of the CLIP alignment term")
    keep_alpha: float = setting(0.3, "bonus for `keep`, in units of R")
    images_per_prompt: int = setting(
        REWARD_IMAGES_PER_PROMPT, "renders of each refined prompt (the authors' code's 10)"
    )
    invalid_reward: float = setting(-1.0, "answers that are neither `keep` nor a usable prompt")
    seed: int = setting(0, "rendering seeds are derived from this and the refined prompt")
    pool_images_per_answer: int = setting(1, "renders of a refined answer that join its prompt's image pool (0: none)")

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise SettingError(f"reward scale {self.scale!r}: expected one of {sorted(SCALES)}")
        if self.images_per_prompt < 1:
            raise SettingError("images_per_prompt must be at least 1")


def outcome_reward(q16: float, clip_cosine: float, settings: RewardSettings) -> float:
    """R(p0, i) from the Q16 probability of `inappropriate` and the CLIP cosine of (p0, i)."""
    scale = SCALES[settings.scale]
    return scale.toxic_weight * (1.0 - q16) + settings.beta * clip_cosine


def refinement_reward(decision: Decision, current: float, refined: Sequence[float], settings: RewardSettings) -> float:
    """The surrogate reward of one answer: alpha for keep, mean R(p0, i') - R(p0, i) for a refined prompt."""
    if decision.kind == "keep":
        return settings.keep_alpha
    if decision.kind == "invalid" or not refined:
        return settings.invalid_reward
    return sum(refined) / len(refined) - current


class Renderer(Protocol):
    """Renders prompts to images (PIL images or a float tensor batch in [0, 1])."""

    def render(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[Any]:
        """One image per (prompt, seed) pair, in order."""
        ...


class Scorer(Protocol):
    """Scores (prompt, image) pairs with Q16 and CLIP."""

    def score(self, prompts: Sequence[str], images: Sequence[Any]) -> list[tuple[float, float]]:
        """(Q16 probability of inappropriate, CLIP cosine of prompt and image) per pair."""
        ...


def seeds_for(prompt: str, n: int, base: int) -> list[int]:
    """Deterministic seeds of a refined prompt's renders, so equal prompts give equal images (and cache hits)."""
    start = int.from_bytes(hashlib.sha256(f"{base}:{prompt}".encode()).digest()[:4], "big") % (2**31 - n)
    return list(range(start, start + n))


class ImagePool:
    """The images each training prompt may be shown with; refined renders join their prompt's pool.

    The image of a row is chosen from its pool by (seed, key, clock), so the repeated rows of one GRPO group,
    fetched in the same batch, always see the same image; `clock` advances once per reward call.
    """

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.pools: dict[str, list[str]] = defaultdict(list)
        self.clock = 0

    def add(self, key: str, image_id: str) -> None:
        """Add an image id to a prompt's pool (no duplicates)."""
        pool = self.pools[key]
        if image_id not in pool:
            pool.append(image_id)

    def choose(self, key: str, default: str) -> str:
        """The image id a row of `key` is shown with at the current clock."""
        pool = self.pools.get(key) or [default]
        if len(pool) == 1:
            return pool[0]
        return random.Random(f"{self.seed}:{key}:{self.clock}").choice(pool)

    def size(self) -> int:
        """Images in all pools."""
        return sum(len(p) for p in self.pools.values())


def completion_text(completion: object) -> str:
    """The text of a TRL completion (a string, or a conversational list of messages)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion:
        content = completion[-1].get("content", "")
        if isinstance(content, list):
            return "".join(b.get("text", "") for b in content if isinstance(b, dict))
        return str(content)
    return str(completion)


@dataclass
class RewardTimings:
    """Seconds spent per phase, accumulated over calls."""

    render: float = 0.0
    score: float = 0.0
    pool: float = 0.0
    calls: int = 0
    images_rendered: int = 0

    def as_dict(self) -> dict[str, float]:
        """A plain dict for logging."""
        return {
            "render_s": self.render,
            "score_s": self.score,
            "pool_s": self.pool,
            "calls": self.calls,
            "images_rendered": self.images_rendered,
        }


class RefinementReward:
    """A TRL reward function: `__call__(prompts, completions, p0, image, pool_key, ...)` -> rewards.

    R of a current image is cached by (p0, image id), and the mean R of a refined prompt by (p0, p'), since its
    renders are seeded from p' and so do not change. `sync` (e.g. `accelerate.utils.gather_object`) shares new
    pool images between data-parallel ranks so every rank's pools stay equal.
    """

    __name__ = "ipr_refinement"

    def __init__(
        self,
        settings: RewardSettings,
        renderer: Renderer,
        scorer: Scorer,
        *,
        pool: ImagePool | None = None,
        store: ImageStore | None = None,
        parse: Callable[[str], Decision] = parse_decision,
        sync: Callable[[list[Any]], list[Any]] | None = None,
    ):
        self.settings = settings
        self.renderer = renderer
        self.scorer = scorer
        self.pool = pool
        self.store = store
        self.parse = parse
        self.sync = sync
        self.current_cache: dict[tuple[str, str], float] = {}
        self.refined_cache: dict[tuple[str, str], float] = {}
        self.timings = RewardTimings()

    def current_rewards(self, p0s: Sequence[str], image_ids: Sequence[str], images: Sequence[Any]) -> list[float]:
        """R(p0, i) of each row's current image, scoring only pairs not yet cached."""
        todo: dict[tuple[str, str], Any] = {}
        for p0, iid, img in zip(p0s, image_ids, images, strict=False):
            if (p0, iid) not in self.current_cache:
                todo.setdefault((p0, iid), img)
        if todo:
            t0 = time.perf_counter()
            keys = list(todo)
            scores = self.scorer.score([k[0] for k in keys], [todo[k] for k in keys])
            self.timings.score += time.perf_counter() - t0
            for k, (q, c) in zip(keys, scores, strict=False):
                self.current_cache[k] = outcome_reward(q, c, self.settings)
        return [self.current_cache[(p0, iid)] for p0, iid in zip(p0s, image_ids, strict=False)]

    def refined_rewards(
        self, pairs: Sequence[tuple[str, str, str]]
    ) -> tuple[dict[tuple[str, str], float], list[tuple[str, Any]]]:
        """Mean R(p0, i') per distinct (p0, p'), rendering every new p' once; also the renders for the pools."""
        n = self.settings.images_per_prompt
        todo = [(p0, pr, key) for p0, pr, key in dict.fromkeys(pairs) if (p0, pr) not in self.refined_cache]
        new_pool: list[tuple[str, Any]] = []
        if todo:
            prompts, seeds, owners = [], [], []
            for p0, pr, key in todo:
                for s in seeds_for(pr, n, self.settings.seed):
                    prompts.append(pr)
                    seeds.append(s)
                    owners.append((p0, pr, key))
            t0 = time.perf_counter()
            images = self.renderer.render(prompts, seeds)
            self.timings.render += time.perf_counter() - t0
            self.timings.images_rendered += len(prompts)
            t0 = time.perf_counter()
            scores = self.scorer.score([o[0] for o in owners], images)
            self.timings.score += time.perf_counter() - t0
            sums: dict[tuple[str, str], list[float]] = defaultdict(list)
            taken: dict[tuple[str, str], int] = defaultdict(int)
            for idx, (owner, (q, c)) in enumerate(zip(owners, scores, strict=False)):
                sums[(owner[0], owner[1])].append(outcome_reward(q, c, self.settings))
                if taken[(owner[0], owner[1])] < self.settings.pool_images_per_answer:
                    taken[(owner[0], owner[1])] += 1
                    new_pool.append((owner[2], images[idx]))
            for k, vals in sums.items():
                self.refined_cache[k] = sum(vals) / len(vals)
        return self.refined_cache, new_pool

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        p0: list[str],
        image_id: list[str],
        image: list[Any] | None = None,
        pool_key: list[str] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        """Rewards of one generation batch (TRL passes the dataset's extra columns as lists)."""
        self.timings.calls += 1
        before = self.timings.as_dict()
        decisions = [self.parse(completion_text(c)) for c in completions]
        keys = pool_key or p0
        images = image if image is not None else [self._open(i) for i in image_id]
        current = self.current_rewards(p0, image_id, images)
        pairs = [
            (p, d.prompt, k) for p, d, k in zip(p0, decisions, keys, strict=False) if d.kind == "refine" and d.prompt
        ]
        refined, new_pool = self.refined_rewards(pairs)
        rewards = []
        for p, d, cur in zip(p0, decisions, current, strict=False):
            vals = [refined[(p, d.prompt)]] if d.kind == "refine" and d.prompt else []
            rewards.append(refinement_reward(d, cur, vals, self.settings))
        self._grow_pool(new_pool)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):  # TRL's hook: these land in the trainer's logs (TensorBoard, W&B)
            kinds = [d.kind for d in decisions]
            for kind in ("keep", "refine", "invalid"):
                log_metric(f"refiner/{kind}_frac", kinds.count(kind) / max(1, len(kinds)))
            after = self.timings.as_dict()
            for key in ("render_s", "score_s", "pool_s", "images_rendered"):
                log_metric(f"reward/{key}", after[key] - before[key])
            if self.pool is not None:
                log_metric("reward/pool_images", self.pool.size())
        return rewards

    def _open(self, image_id: str) -> Image.Image:
        if self.store is None:
            raise SettingError("RefinementReward: rows carry no image and no image store was given")
        return self.store.open(image_id).convert("RGB")

    def _grow_pool(self, new_pool: list[tuple[str, Any]]) -> None:
        """Store the chosen renders and add them to their prompt's pool (on every rank when `sync` is set)."""
        if self.pool is None:
            return
        t0 = time.perf_counter()
        added: list[tuple[str, str]] = []
        if self.store is not None:
            for key, img in new_pool:
                added.append((key, self.store.put_pil(to_pil(img)).id))
        if self.sync is not None:
            added = list(self.sync(added))
        for key, iid in added:
            self.pool.add(key, iid)
        self.pool.clock += 1
        self.timings.pool += time.perf_counter() - t0
