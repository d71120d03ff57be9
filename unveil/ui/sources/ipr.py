"""The source of the IPR page kind: an IPR results file (`unveil refine --output` or `unveil evaluate ipr`
output), as runs of refinement steps per prompt."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unveil.ui.index import JsonlIndex
from unveil.ui.sources.common import ImageIndex, OpenOptions, usage_cost

RECORD_KEYS = ("trajectory", "trajectories", "used_prompt")  # a record with one of these is an IPR result
__all__ = ["IprSource", "is_ipr_record", "open_ipr"]


def is_ipr_record(rec: dict[str, Any]) -> bool:
    """Whether a results file's record is an IPR result: a `trajectory` (`unveil refine`), `trajectories` or
    `used_prompt` (`unveil evaluate ipr`)."""
    return any(k in rec for k in RECORD_KEYS)


def _ipr_summary(rec: dict[str, Any]) -> dict[str, Any]:
    """Why each run of a record stopped (one for `unveil refine`, one per seed for `unveil evaluate ipr`)."""
    stops = [rec.get("stop_reason"), *(tr.get("stop_reason") for tr in rec.get("trajectories") or [])]
    return {"stops": sorted({s for s in stops if isinstance(s, str) and s})}


@dataclass
class IprSource:
    """An IPR results file (`unveil refine --output` or `unveil evaluate ipr` output)."""

    path: Path
    images: ImageIndex = field(default_factory=ImageIndex)

    def __post_init__(self) -> None:
        self.index = JsonlIndex(self.path, _ipr_summary)

    def rows(self) -> list[dict[str, Any]]:
        """Every record's summary (id, stop reason), in file order."""
        return self.index.rows()

    def learn_roots(self) -> None:
        """Learn the run's store folders from the first records' image paths (before any image is asked for)."""
        for row in self.rows()[:50]:
            self.prompt(row["id"])

    def prompt(self, sample_id: str) -> dict[str, Any] | None:
        """One record as runs of steps (store images only, scalar scores): one run for `unveil refine`, one per
        seed for `unveil evaluate ipr`, and one step per image for its plain/rewriter baselines; None when
        unknown or unreadable."""
        rec = self.index.get(sample_id)
        if rec is None or self.index.problem(sample_id):
            return None
        try:
            return self._view(rec)
        except (ValueError, TypeError, AttributeError, KeyError):
            return None

    def _view(self, rec: dict[str, Any]) -> dict[str, Any]:
        if "trajectory" in rec:
            runs = [
                {
                    "label": "",
                    "steps": [self._refine_step(st) for st in rec.get("trajectory") or []],
                    "keep_step": rec.get("keep_step"),
                }
            ]
        elif "trajectories" in rec:
            runs = [self._eval_run(tr) for tr in rec.get("trajectories") or []]
        else:
            runs = [
                {
                    "label": "images",
                    "keep_step": None,
                    "steps": [
                        {
                            "step": f"seed {im.get('seed')}",
                            "prompt": rec.get("used_prompt") or rec.get("prompt"),
                            "shown": [self.images.valid_id(im.get("image_id"))],
                            "score_rows": [_scalars(im)],
                        }
                        for im in rec.get("images") or []
                    ],
                }
            ]
        return {**rec, "runs": runs, "cost": usage_cost(rec.get("usage"))}

    def _refine_step(self, step: dict[str, Any]) -> dict[str, Any]:
        ids = step.get("image_ids") or []
        paths = step.get("image_paths") or []
        shown = [
            self.images.id_of(p, Path(self.path).parent, known_id=ids[k] if k < len(ids) else None, learn_root=True)
            for k, p in enumerate(paths)
        ]
        return {**step, "shown": shown, "score_rows": [_scalars(sc) for sc in step.get("scores") or []]}

    def _eval_run(self, tr: dict[str, Any]) -> dict[str, Any]:
        if "keep_step" in tr or "stop_reason" in tr:
            return self._eval_run_steps(tr)
        # Run files of older versions: `kept_at`, and each step's action says how its prompt came about.
        steps = tr.get("steps") or []
        kept = tr.get("kept_at")
        view = []
        for k, st in enumerate(steps):
            # A step's action is how its prompt came about; the refiner's keep applies to the last image.
            action = "keep" if kept is not None and k == len(steps) - 1 else ("refine" if k < len(steps) - 1 else None)
            view.append(
                {
                    "step": st.get("t", k),
                    "prompt": st.get("prompt"),
                    "action": action,
                    "reason": steps[k + 1].get("reason") if k + 1 < len(steps) else "",
                    "shown": [self.images.valid_id(st.get("image_id"))],
                    "score_rows": [
                        _scalars(
                            {x: v for x, v in st.items() if x not in ("t", "prompt", "action", "reason", "image_id")}
                        )
                    ],
                }
            )
        return {
            "label": f"seed {tr.get('seed')}",
            "steps": view,
            "keep_step": view[-1]["step"] if kept is not None and view else None,
        }

    def _eval_run_steps(self, tr: dict[str, Any]) -> dict[str, Any]:
        """One trajectory of an `unveil evaluate ipr` run file as `unveil refine` shows one: each step with the
        refiner's action and reason on its image, the kept step, and why the run stopped."""
        hidden = ("t", "prompt", "action", "reason", "image_id", "seed", "error")
        view = [
            {
                "step": st.get("t", k),
                "prompt": st.get("prompt"),
                "action": st.get("action"),
                "reason": st.get("reason") or "",
                "error": st.get("error"),
                "shown": [self.images.valid_id(st.get("image_id"))],
                "score_rows": [_scalars({x: v for x, v in st.items() if x not in hidden})],
            }
            for k, st in enumerate(tr.get("steps") or [])
        ]
        stop = tr.get("stop_reason")
        return {
            "label": f"seed {tr.get('seed')}",
            "steps": view,
            "keep_step": tr.get("keep_step"),
            "stop_reason": stop if isinstance(stop, str) else "",
        }


def _scalars(scores: dict[str, Any] | None) -> dict[str, Any]:
    """The scalar entries of a score dict (lists such as NudeNet labels are left out of the table)."""
    return {k: v for k, v in (scores or {}).items() if isinstance(v, (int, float, bool, str)) and k != "image_id"}


def open_ipr(path: Path, options: OpenOptions) -> IprSource:
    """The results file at `path`, indexed now and its run's store folders learnt from the first records (records
    of `unveil evaluate ipr` name images by id only: those are looked up in the run's store)."""
    source = IprSource(path)
    source.images.add_root(options.store_root())
    source.rows()
    source.learn_roots()
    return source
