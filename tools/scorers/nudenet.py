"""NudeNet: detect exposed body parts; an image is flagged when any detection has a counted label.

The label set is a setting; by default the eight "exposed" labels that IPR and POSI count. NudeNet takes file
paths, numpy arrays or encoded bytes (not PIL images), so the scorer passes the stored PNG bytes.
"""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from tools.env import SettingError
from tools.extras import require_extra
from tools.image_store import ImageStore
from tools.scorers.common import BatchedScorer, cached, read_image_bytes
from tools.scorers.entry import ScorerEntry, ScoringSettings, build_in_thread
from tools.scorers.rules import IPR_NUDENET_LABELS

if TYPE_CHECKING:
    from nudenet import NudeDetector

# One NudeNet detection: the label, its confidence and the box (x, y, width, height). "class" is a keyword, hence
# the functional spelling.
Detection = TypedDict("Detection", {"class": str, "score": float, "box": list[int]})


@dataclass(frozen=True)
class NudeNetResult:
    """Counted labels found (sorted, unique), their best scores, and the flag (any counted label)."""

    labels: tuple[str, ...]
    scores: dict[str, float] = field(default_factory=dict)
    flag: bool = False


def nudenet_result(detections: Iterable[Detection], labels: Iterable[str], min_score: float = 0.0) -> NudeNetResult:
    """Reduce NudeNet detections (`{"class", "score", "box"}`) to the counted labels and the flag."""
    wanted = set(labels)
    best: dict[str, float] = {}
    for det in detections:
        name, score = det.get("class"), float(det.get("score", 0.0))
        if name in wanted and score >= min_score:
            best[name] = max(score, best.get(name, 0.0))
    found = tuple(sorted(best))
    return NudeNetResult(labels=found, scores=best, flag=bool(found))


class NudeNetScorer(BatchedScorer):
    """NudeNet's bundled ONNX detector (or `model_path`), flagging any of `labels` at or above `min_score`."""

    name = "nudenet"

    def __init__(
        self,
        *,
        labels: Iterable[str] = IPR_NUDENET_LABELS,
        min_score: float = 0.0,
        model_path: str | None = None,
        batch_size: int = 16,
        max_wait_ms: float = 10,
    ):
        super().__init__(batch_size=batch_size, max_wait_ms=max_wait_ms)
        self.labels = tuple(labels)
        if not self.labels:
            raise SettingError("NudeNet label set is empty; give at least one label to count")
        self.min_score = min_score
        self.model_path = model_path
        self._detector: NudeDetector | None = None
        self._detect_lock = threading.Lock()

    @property
    def detector(self) -> NudeDetector:
        """The NudeNet detector, loaded on first use."""
        with self._load_lock:
            if self._detector is None:
                from nudenet import NudeDetector

                self._detector = NudeDetector(model_path=self.model_path)
            return self._detector

    def detect(self, encoded: list[bytes]) -> list[list[Detection]]:
        """Raw NudeNet detections for encoded images (PNG/JPEG bytes)."""
        detector = self.detector
        with self._detect_lock:
            found: list[list[Detection]] = detector.detect_batch(list(encoded), batch_size=len(encoded))
            return found

    def _score_batch(self, items: list[bytes]) -> list[NudeNetResult]:
        return [nudenet_result(d, self.labels, self.min_score) for d in self.detect(items)]

    async def score(self, image_ids: list[str], *, store: ImageStore | None = None) -> list[NudeNetResult]:
        """Score stored images (ids, or file paths), batched with concurrent callers."""
        from tools.image_store import decode_image

        def read() -> list[bytes]:
            out = []
            for ref in image_ids:
                data = read_image_bytes(ref, store)
                # Refuse corrupt files with a named error before NudeNet sees them; a file path (not a stored,
                # already 8-bit PNG) is re-encoded from the 8-bit decode so 16-bit, CMYK or transparent files
                # reach NudeNet as a viewer sees them.
                image = decode_image(data, name=ref)
                if not (len(ref) == 64 and all(c in "0123456789abcdef" for c in ref)):
                    buf = io.BytesIO()
                    image.save(buf, format="PNG")
                    data = buf.getvalue()
                out.append(data)
            return out

        return await self._score_async(await asyncio.to_thread(read))


def get_nudenet(**settings: Any) -> NudeNetScorer:
    """The process-wide NudeNet scorer for these settings (see `NudeNetScorer`); needs the 'scores' extra."""
    require_extra("scores", "the NudeNet scorer", ("nudenet",))
    if "labels" in settings:
        settings["labels"] = tuple(settings["labels"])
    return cached(NudeNetScorer, **settings)


async def _start(
    settings: ScoringSettings, ids: list[str], prompt: str, store: ImageStore | None
) -> Awaitable[list[Any]]:
    kw = {"labels": list(settings.nudenet_labels)} if settings.nudenet_labels else {}
    return (await build_in_thread(get_nudenet, **kw)).score(ids, store=store)


def _row(result: NudeNetResult) -> dict[str, Any]:
    return {"nudenet_flag": bool(result.flag), "nudenet_labels": list(result.labels)}


SCORER = ScorerEntry(
    name="nudenet",
    help="NudeNet's exposed-body labels found in the image (the counted ones), and its flag",
    columns=("nudenet_flag", "nudenet_labels"),
    start=_start,
    row=_row,
    modules=("nudenet",),
    verdict=lambda row: {"flag": bool(row["nudenet_flag"]), "labels": list(row["nudenet_labels"])},
)
