"""CTD generation: Architect -> Eraser (+ text-to-image) -> single-modality check -> Judges (in parallel) ->
Gatekeeper -> [feedback -> Eraser]* -> human verification.

The Architect drafts an explicit scene of a risk category; the Eraser hides its cue behind a benign carrier and
renders the image; with `modality_check` (Unveil's addition, off by default as in the paper) the image alone
and the text alone must each be judged benign; then a panel of judges (one reason-informed, `n_blind` blind, one
forced-reasoning; each with its own model spec) votes in parallel through
`Send`, and the acceptance rule of `graphs/ctd/rules.py` decides in code. A rejected attempt gets targeted
feedback from a model and goes back to the Eraser, up to `max_rounds` attempts; then the scene is dropped and
recorded as such. An accepted pair goes to human verification: an `interrupt()` (resume with
`{"decision": "approve"|"reject"|"send_back", "note": "..."}`; a send back gives the Eraser another attempt
that reads the note), a review queue for batch runs, or none. With the server's
review folder set (`UNVEIL_REVIEW_DIR`), the interrupt is shared with the web app on that folder
(`graphs.ctd.review`).

State holds ids and paths of images, never their bytes.

The package has one module a job: `context` (the run's settings), `state`, `resources` (generator and image store),
`classify` (image classifiers and moderation scores), `rules` (the Gatekeeper's acceptance rule, the review
policy and agreement statistics: pure functions), `nodes` (the generation nodes and routes), `review_payload`,
`human_review` and `send_back` (human verification), `review` (the review folder's decisions, shared with the
web app), `labels` (a review folder's label schema), and `build` (the compiled graph). `rules`, `review` and
`labels` load no model stack: the web app and `unveil review` use them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graphs.ctd.build import builder, graph
    from graphs.ctd.context import CtdContext
    from graphs.ctd.resources import ctd_generator
    from graphs.ctd.review_payload import THUMBNAIL_PIXELS, thumbnail_data_url
    from graphs.ctd.state import CtdInput, CtdOutput, CtdState

# Each public name and the module it lives in. They load on first use (PEP 562), so reading the settings of
# `graphs.ctd.context` (the CLI's help) neither builds the graph nor loads the model stack.
_HOMES = {
    "builder": "build",
    "graph": "build",
    "CtdContext": "context",
    "ctd_generator": "resources",
    "THUMBNAIL_PIXELS": "review_payload",
    "thumbnail_data_url": "review_payload",
    "CtdInput": "state",
    "CtdOutput": "state",
    "CtdState": "state",
}

__all__ = [
    "THUMBNAIL_PIXELS",
    "CtdContext",
    "CtdInput",
    "CtdOutput",
    "CtdState",
    "builder",
    "ctd_generator",
    "graph",
    "thumbnail_data_url",
]


def __getattr__(name: str) -> object:
    """A public name of the package, imported from its module on first use."""
    if name not in _HOMES:
        raise AttributeError(f"module 'graphs.ctd' has no attribute {name!r}")
    return getattr(importlib.import_module(f"graphs.ctd.{_HOMES[name]}"), name)
