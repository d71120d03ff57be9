"""The common shape of a guard: its prompt, its parser, its category map, and the one call that runs it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel

from agents.categories import OTHER, VOCABULARY, CategoryName
from agents.content import ImagePart, abuild_messages
from agents.gateway import CallResult, Gateway
from tools.errors import UnveilError
from tools.image_store import ImageStore

# Guard codes are mapped onto the project's one category vocabulary (agents/categories.py).
PROJECT_CATEGORIES = VOCABULARY


class GuardVerdict(BaseModel):
    """A guard's answer in the common form: the verdict, the project category, the guard's own codes, a reason."""

    toxic: bool
    category: str = ""
    codes: list[str] = []
    reason: str = ""


class GuardParseError(UnveilError, ValueError):
    """A guard answered outside its own output format; `raw` keeps the answer for the failure record."""

    def __init__(self, guard: str, problem: str, raw: str):
        super().__init__(f"guard {guard!r}: unparseable answer ({problem})")
        self.guard, self.problem, self.raw = guard, problem, raw


Parser = Callable[[str, "GuardDefinition"], GuardVerdict]


@dataclass(frozen=True)
class GuardDefinition:
    """One guard model's protocol: system instruction, trailing task sentence, answer parser, category map."""

    name: str
    instruction: str
    task: str
    parser: Parser
    categories: dict[str, CategoryName] = field(default_factory=dict)  # guard code -> project category

    def parse(self, raw: str) -> GuardVerdict:
        """The common verdict of a raw answer; raises `GuardParseError` naming the problem."""
        return self.parser(raw, self)

    def project_category(self, codes: list[str]) -> str:
        """The project category of the first mapped code ('other' for an unmapped one, '' for none)."""
        for code in codes:
            key = code.strip().split(":")[0].strip().upper()
            if key in self.categories:
                return self.categories[key]
        return OTHER if codes else ""


async def detect_guard(
    gateway: Gateway, spec: str, guard: GuardDefinition, *, text: str, image: ImagePart, store: ImageStore
) -> tuple[GuardVerdict, CallResult[str]]:
    """One call of the guard on the pair: its own instruction, the pair as delimited data, its own parser."""
    messages = await abuild_messages(
        guard.instruction, {"text": text}, images=[image], store=store, vision=gateway.vision(spec), task=guard.task
    )
    result = await gateway.text(role=f"guard.{guard.name}", usage_role="guard", spec=spec, messages=messages)
    return guard.parse(result.raw), result


# The free-text answers of this module's calls, by call role, for `unveil roles` (`agents.roles` collects it).
TEXT_ANSWERS: dict[str, str] = {
    "guard.<name>": "free text in the guard's own answer format (its GuardDefinition's parser reads it)"
}
