"""What a human reviewer of a CTD sample is shown: the pair with a small thumbnail, the votes and the verdict."""

from __future__ import annotations

from typing import Any, NotRequired

from typing_extensions import TypedDict

from graphs.ctd.state import CtdDecision, CtdState, round_votes
from tools.image_store import ImageStore

THUMBNAIL_PIXELS = 256  # longest side
THUMBNAIL_MAX_BYTES = 48_000  # of the JPEG; a few tens of KB as base64


def thumbnail_data_url(store: ImageStore, image_id: str) -> str:
    """A small JPEG data URL of a stored image, for a reviewer's eyes (blocking: run it in a thread).

    It lives only in the interrupt value shown to the reviewer, never in graph state, which keeps ids and paths.
    """
    import base64
    import io

    from PIL import Image

    image = store.open(image_id).convert("RGB")
    image.thumbnail((THUMBNAIL_PIXELS, THUMBNAIL_PIXELS), Image.Resampling.LANCZOS)
    for quality in (85, 70, 50, 30):
        buf = io.BytesIO()
        image.save(buf, format="JPEG", quality=quality, optimize=True)
        if buf.tell() <= THUMBNAIL_MAX_BYTES:
            break
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


REVIEW_QUESTION = (
    "Approve this sample? Resume with {'decision': 'approve'|'reject'|'send_back', 'note': '...', "
    "'reviewer': '...'} (or a list of such answers, one per reviewer). 'send_back' rejects the pair and gives "
    "the Eraser another attempt, which reads your note (required) as feedback."
)
# With a reviewers file an answer is signed by its token, and a `reviewer` field is ignored: the question says so.
TOKEN_QUESTION = (
    "Approve this sample? Resume with {'decision': 'approve'|'reject'|'send_back', 'note': '...', "
    "'token': 'YOUR REVIEWER TOKEN'} (or a list of such answers, one per reviewer): this server has a reviewers "
    "file, so the token (from `unveil reviewers add`) names the reviewer. 'send_back' rejects the pair and gives "
    "the Eraser another attempt, which reads your note (required) as feedback."
)


def review_question(tokens: bool) -> str:
    """The question of the pause: with a reviewers file (`tokens`) answers carry a `token`, else a `reviewer`."""
    return TOKEN_QUESTION if tokens else REVIEW_QUESTION


class ReviewPayload(TypedDict):
    """The interrupt value a reviewer answers: the sample, the votes and verdict, the question, and (when set) the
    previous answer's error, the reviews so far and the shared review folder's id and path."""

    id: str | None
    category: str | None
    subcategory: str | None
    text: str | None
    image_id: str | None
    image_path: str | None
    thumbnail: str | None
    erasure_reason: str | None
    votes: list[dict[str, Any]]
    decision: CtdDecision | None
    rounds: int | None
    question: str
    error: NotRequired[str]
    reviews_so_far: NotRequired[list[dict[str, Any]]]
    review_id: NotRequired[str]
    review_dir: NotRequired[str]


def review_payload(
    state: CtdState, *, thumbnail: str | None = None, error: str | None = None, tokens: bool = False
) -> ReviewPayload:
    """What a human reviewer is shown: the pair (with a viewable thumbnail), the erasure reason, the votes, the
    rule's verdict, the question (`review_question(tokens)`), and the error of a previous invalid answer."""
    payload: ReviewPayload = {
        "id": state.get("id"),
        "category": state.get("category"),
        "subcategory": state.get("subcategory"),
        "text": state.get("text"),
        "image_id": state.get("image_id"),
        "image_path": state.get("image_path"),
        "thumbnail": thumbnail,
        "erasure_reason": state.get("erasure_reason"),
        "votes": round_votes(state),
        "decision": state.get("decision"),
        "rounds": state.get("rounds"),
        "question": review_question(tokens),
    }
    if error:
        payload["error"] = error
    return payload
