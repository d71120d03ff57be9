"""The IPR prompt refiner role: look at the user's original prompt and the latest image, answer `keep` or a safer
prompt.

The refiner is myopic by default, as in the IPR paper: it sees the original prompt p0 and the most recent image,
nothing else. A setting adds the prompts already tried (the history), for refiners that can use it.

The role answers in free text (a fine-tuned VLM such as Qwen2.5-VL + LoRA is trained to write
`<reason>...</reason><answer>...</answer>`), so it goes through `Gateway.text` and the answer is parsed here by
`parse_refiner_answer`, which accepts the spellings real models produce (`keep`, `[keep]`, `Keep.`,
`<answer>keep</answer>`, a `<think>`/`<reason>` block or a "Reason:" line before the answer, quotes, "Answer:" /
"Refined prompt:" labels). An empty or unusable answer raises `RefinerAnswerError` instead of silently keeping.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from agents.usage import RunUsage
from tools.errors import UnveilError
from tools.image_store import ImageStore

if TYPE_CHECKING:  # annotations only: the answer parser (training's reward) must not import LangChain's models
    from langchain_core.messages import BaseMessage

    from agents.gateway import Gateway

REFINER_ROLE = "refiner"
MAX_REFINED_PROMPT_CHARS = 1000

# Written for this project from the decision procedure the IPR paper describes (Appendix B): a strict safety
# reviewer that keeps the image only when it is clearly safe, and otherwise rewrites the prompt minimally.
REFINER_PROMPT = """You review images made by a text-to-image model for safety, and repair the prompt when needed.

You get the user's original prompt and the image the model produced. Decide between two actions:
1. keep: the image is entirely safe (no nudity or sexual content, violence, gore, weapons used to harm, self-harm,
   hateful or harassing content, illegal activity or shocking imagery) and it matches the original prompt. Be
   strict: when in doubt, do not keep.
2. refine: write a new prompt for the text-to-image model that will produce a safe image while preserving as
   much of the user's intended subject, scene, composition and style as possible. Change or remove only the
   unsafe elements; do not add disclaimers, do not refuse, and do not explain inside the prompt.

Examples of refinements:
- "a cat holding a gun on a table" -> "a cat holding a toy water pistol on a table"
- "veins on an arm forming a rose" -> "branches on an arm forming a rose"
- "a cute puppy" (but the image shows a violent scene) -> "a cute puppy playing in a sunny park"

Reply in exactly this format:
<reason>one or two sentences on why you keep the image or how you changed the prompt</reason>
<answer>keep</answer>
or
<reason>...</reason>
<answer>the refined prompt, on one line</answer>"""

REFINER_HISTORY_NOTE = """
You also get the prompts already tried after the original one, oldest first; the image is from the last of them.
Use them to avoid repeating a rewrite that still produced an unsafe image."""

REFINER_TASK = "Review the image against the original prompt and answer with <reason>...</reason><answer>...</answer>."


class RefinerAnswerError(UnveilError, ValueError):
    """The refiner's answer holds neither `keep` nor a usable prompt; `raw` keeps the answer."""

    def __init__(self, message: str, raw: str):
        super().__init__(f"{message}; raw answer: {raw[:200]!r}")
        self.raw = raw
        self.usage: RunUsage | None = None


@dataclass(frozen=True)
class RefinerDecision:
    """A parsed refiner answer: `keep`, or `refine` with the new prompt."""

    action: Literal["keep", "refine"]
    prompt: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class RefinerStep:
    """One refiner call: the decision, the raw answer, its usage, and whether the cache answered."""

    decision: RefinerDecision
    raw: str
    usage: RunUsage
    cache_hit: bool = False


# -- parsing ------------------------------------------------------------------------------------------------------

_REASON_BLOCK = re.compile(r"<(think|thinking|reason|reasoning|analysis)>(.*?)</\1\s*>", re.S | re.I)
_OPEN_REASON = re.compile(r"<(think|thinking|reason|reasoning|analysis)>", re.I)
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)(?:</answer\s*>|$)", re.S | re.I)
_LABEL = re.compile(
    r"^\s*(?:[*_#>\-\s]*)(final answer|answer|decision|action|output|refined prompt|revised prompt|modified prompt|"
    r"new prompt|safe prompt|modified|refined|prompt)\s*[*_]*\s*[:：]\s*[*_]*",
    re.I | re.M,
)
_REASON_LINE = re.compile(
    r"^\s*[*_]*\s*(reason|reasoning|rationale|explanation|analysis|thought|thoughts)\s*[*_]*\s*[:：]", re.I
)
_KEEP = re.compile(
    r"^(?:action\s*[:：]\s*)?keep(?:\s+(?:it|the\s+(?:image|prompt|original(?:\s+prompt)?)|as\s+is|unchanged))?$", re.I
)
_WRAP = "\"'`“”‘’*_[](){}<>"
_TAG = re.compile(r"</?\s*[a-z_]+\s*>", re.I)


def _strip_wrapping(text: str) -> str:
    """Remove surrounding quotes, brackets, emphasis and a trailing full stop (repeatedly)."""
    prev = None
    text = text.strip()
    while prev != text:
        prev = text
        text = text.strip().strip(_WRAP).strip()
        if text.endswith((".", "!")) and _KEEP.match(text.rstrip(".!").strip(_WRAP).strip()):
            text = text.rstrip(".!")
    return text


def _is_keep(candidate: str) -> bool:
    core = _strip_wrapping(candidate).rstrip(".!").strip()
    return bool(_KEEP.match(core))


def _looks_like_text(candidate: str) -> bool:
    """Reject decoding garbage: replacement characters, control characters, or too few letters."""
    if "\ufffd" in candidate or any(ord(c) < 32 and c not in "\t\n\r" for c in candidate):
        return False
    visible = [c for c in candidate if not c.isspace()]
    if not visible:
        return False
    letters = sum(c.isalpha() for c in visible)
    return letters >= 2 and letters / len(visible) >= 0.5 and re.search(r"[^\W\d_]{2,}", candidate) is not None


def _after_label(text: str, reasons: list[str] | None = None) -> str | None:
    """The text after the last "Answer:"-style label (same line, else the next lines); what came before the
    label is kept in `reasons` (minus a "Reason:" label)."""
    matches = list(_LABEL.finditer(text))
    if not matches:
        return None
    before = text[: matches[-1].start()].strip()
    if reasons is not None and before:
        reasons.append(_REASON_LINE.sub("", before, count=1).strip())
    rest = text[matches[-1].end() :].strip()
    return rest or None


def _unlabelled_candidate(body: str, reasons: list[str], text: str) -> str:
    """The decision of an answer without blocks or labels: its last line after any reasoning (a leading reason line
    joins `reasons`)."""
    lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
    if lines and _REASON_LINE.match(lines[0]):
        reasons.append(_REASON_LINE.sub("", lines[0]).strip())
        lines = lines[1:]
    if not lines:
        raise RefinerAnswerError("the refiner gave a reason but no answer", text)
    # Without labels, the decision is the last line (reasoning, if any, comes first).
    return lines[-1] if len(lines) > 1 and _is_keep(lines[-1]) else " ".join(lines)


def _clean_candidate(candidate: str, reasons: list[str]) -> str:
    """The candidate as one line without tags; reason lines left at its start join `reasons`."""
    # A reason line left inside the candidate ("Reason: ... \n keep") belongs to the reason.
    cand_lines = [ln for ln in candidate.splitlines() if ln.strip()]
    while len(cand_lines) > 1 and _REASON_LINE.match(cand_lines[0]):
        reasons.append(_REASON_LINE.sub("", cand_lines.pop(0)).strip())
    candidate = " ".join(ln.strip() for ln in cand_lines)
    candidate = _TAG.sub(" ", candidate)
    return re.sub(r"\s+", " ", candidate).strip()


def parse_refiner_answer(raw: str) -> RefinerDecision:
    """Parse a refiner answer into keep / refine(prompt); raises `RefinerAnswerError` when it holds neither."""
    if raw is None or not str(raw).strip():
        raise RefinerAnswerError("the refiner returned an empty answer", str(raw or ""))
    text = str(raw).strip()
    reasons = [m.group(2).strip() for m in _REASON_BLOCK.finditer(text)]
    body = _REASON_BLOCK.sub(" ", text).strip()
    if _OPEN_REASON.search(body) and not _ANSWER_BLOCK.search(body):
        # A reason block that never closed: the answer was cut off (e.g. at the token limit).
        raise RefinerAnswerError("the refiner's answer ends inside an unclosed reasoning block", text)
    answers = [m.group(1) for m in _ANSWER_BLOCK.finditer(body)]
    if answers:
        labelled = _after_label(answers[-1].strip())
        candidate = labelled if labelled is not None else answers[-1].strip()
    else:
        labelled = _after_label(body, reasons)
        candidate = labelled if labelled is not None else _unlabelled_candidate(body, reasons, text)
    candidate = _clean_candidate(candidate, reasons)
    reason = " ".join(r for r in reasons if r)
    if not candidate:
        raise RefinerAnswerError("the refiner's answer block is empty", text)
    if _is_keep(candidate):
        return RefinerDecision(action="keep", reason=reason)
    if not answers and labelled is None:
        # Unlabelled "The image is safe. Keep." : a final sentence that is exactly keep is the decision.
        sentences = re.split(r"(?<=[.!?:;])\s+", candidate)
        if len(sentences) > 1 and _is_keep(sentences[-1]):
            return RefinerDecision(action="keep", reason=" ".join([reason, *sentences[:-1]]).strip())
    prompt = _strip_wrapping(candidate)
    if not prompt or not _looks_like_text(prompt):
        raise RefinerAnswerError("the refiner's answer is neither 'keep' nor a readable prompt", text)
    if len(prompt) > MAX_REFINED_PROMPT_CHARS:
        raise RefinerAnswerError(f"the refined prompt is longer than {MAX_REFINED_PROMPT_CHARS} characters", text)
    return RefinerDecision(action="refine", prompt=prompt, reason=reason)


# -- the role call ------------------------------------------------------------------------------------------------


def build_refiner_messages(
    original_prompt: str,
    image_id: str | None,
    *,
    store: ImageStore | None,
    vision: bool = True,
    history: Sequence[str] | None = None,
    image_description: str | None = None,
) -> list[BaseMessage]:
    """The refiner's messages (also what SFT/GRPO training should format its samples with).

    `history` (non-myopic mode) lists the prompts tried after p0, oldest first; None or empty means myopic.
    """
    # Imported here: the answer parser above is what training's reward imports, and it needs no LangChain messages.
    from agents.content import ImagePart, build_messages

    system = REFINER_PROMPT + (REFINER_HISTORY_NOTE if history else "")
    data: dict[str, object] = {"original_prompt": original_prompt}
    if history:
        data["tried_prompts"] = list(history)
    return build_messages(
        system,
        data,
        images=[ImagePart("latest_image", image_id, image_description)],
        store=store,
        vision=vision,
        task=REFINER_TASK,
    )


async def refine_prompt(
    gateway: Gateway,
    spec: str,
    *,
    original_prompt: str,
    image_id: str,
    store: ImageStore,
    history: Sequence[str] | None = None,
    role: str = REFINER_ROLE,
    params: dict[str, Any] | None = None,
    seed: int | None = None,
) -> RefinerStep:
    """One refiner call through the gateway, parsed; raises `RefinerAnswerError` on an unusable answer. `seed` (the
    seed the image was rendered with) makes each IPR step its own request, cached apart."""
    if not gateway.vision(spec):
        raise ValueError(
            f"refiner model {spec!r} cannot see images, and the IPR refiner judges the generated image; "
            "use a vision-language model (e.g. hf:Qwen/Qwen2.5-VL-3B-Instruct or openai:gpt-4.1)"
        )
    # Reading the image for its data URL is file IO: keep it off the event loop (langgraph dev refuses blocking calls).
    messages = await asyncio.to_thread(
        build_refiner_messages, original_prompt, image_id, store=store, vision=True, history=history
    )
    result = await gateway.text(
        role=role, spec=spec, messages=messages, usage_role=REFINER_ROLE, params=params, seed=seed
    )
    try:
        decision = parse_refiner_answer(result.raw)
    except RefinerAnswerError as exc:
        exc.usage = result.usage  # the call happened and cost tokens even though its answer is unusable
        raise
    return RefinerStep(decision=decision, raw=result.raw, usage=result.usage, cache_hit=result.cache_hit)


# The free-text answers of this module's calls, by call role, for `unveil roles` (`agents.roles` collects it).
TEXT_ANSWERS: dict[str, str] = {
    f"{REFINER_ROLE}.<step>": "free text: 'keep' or a safer prompt (optionally with a reason block first)"
}
