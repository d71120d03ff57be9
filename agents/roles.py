"""The output schema of every structured role, by call role, for people writing `scripted:` files."""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import BaseModel

# call role -> (module, schema class); free-text roles (the IPR refiner) have no schema and are listed apart.
ROLE_SCHEMAS: dict[str, tuple[str, str]] = {
    "root_extractor.image / root_extractor.text": ("agents.tag.roots", "EntityGraph"),
    "root_extractor (roots_mode=joint)": ("agents.tag.roots", "Roots"),
    "root_judge": ("agents.tag.judges", "RootVerdict"),
    "expander.visual / expander.textual": ("agents.tag.expander", "Expansion"),
    "pair_screen": ("agents.tag.judges", "Screen"),
    "pair_judge": ("agents.tag.judges", "PairJudgement"),
    "explainer": ("agents.tag.explainer", "Explanation"),
    "vanilla_detector": ("agents.tag.vanilla", "VanillaVerdict"),
    "architect": ("agents.ctd.architect", "Scene"),
    "eraser": ("agents.ctd.eraser", "Erasure"),
    "judge.informed / judge.blind.<i> / judge.forced": ("agents.ctd.judges", "Vote"),
    "modality_judge.image / modality_judge.text": ("agents.ctd.judges", "ModalityVerdict"),
    "gatekeeper": ("agents.ctd.gatekeeper", "Feedback"),
    "concept_similarity": ("agents.ctd.similarity", "ConceptSimilarity"),
    "benign_rewriter (CTD --benign)": ("agents.ctd.benign", "BenignText"),
    "labeller (training data)": ("agents.labeller", "LabellerAnswer"),
    "rewriter (text-only baseline)": ("agents.rewriter", "RewrittenPrompt"),
}
TEXT_ROLES = {"refiner.<step>": "free text: 'keep' or a safer prompt (optionally with a reason block first)"}


def role_schemas() -> dict[str, dict[str, Any]]:
    """JSON Schema of each role's answer."""
    out: dict[str, dict[str, Any]] = {}
    for role, (module, name) in ROLE_SCHEMAS.items():
        schema: type[BaseModel] = getattr(importlib.import_module(module), name)
        out[role] = schema.model_json_schema()
    return out
