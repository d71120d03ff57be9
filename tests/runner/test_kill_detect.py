"""`unveil detect` (TAG, pairs with real image files) killed with SIGKILL at random points (several seeds) and
rerun: the output equals an uninterrupted run's record for record (same ids, same content hashes), with no
partial record, orphan image or temp file (see `tests/runner/test_kill_support.py`). `tests/runner/test_batch.py`
also kills a vanilla batch and checks ids; this one checks content and the image store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from PIL import Image

from tests.runner.test_kill_support import (
    ROOT,
    hashes_by_id,
    kill_at_random_points,
    read_records,
    referenced_ids,
    store_ids,
    temp_files,
)

N = 16


@pytest.mark.slow(
    reason="its subject is a real `unveil detect` process SIGKILLed mid-run, three times: a subprocess entry point; "
    "the fast loop resumes batches in the process (tests/runner/test_batch.py, test_batch_integrity.py)"
)
def test_killed_tag_batch_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    from unveil.cli import main

    data = tmp_path / "data"
    data.mkdir()
    for i in range(1, N, 2):  # odd samples have an image file (stored by content hash), even ones a description
        Image.effect_noise((24, 24), 10 + i).convert("RGB").save(data / f"img{i}.png")
    rows = [
        {
            "id": f"s{i}",
            "text": f"text {i}",
            **({"image": f"img{i}.png"} if i % 2 else {"image_description": f"scene {i}"}),
        }
        for i in range(N)
    ]
    src = data / "pairs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # Rules only, so the answers do not depend on which sample asks first.
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "root_extractor.image": [{"when": "", "then": {"entities": [{"name": "noise"}]}}],
                "root_extractor.text": [{"when": "", "then": {"entities": [{"name": "words"}]}}],
                "root_judge": [{"when": "", "then": {"toxic": False}}],
                "expander": [
                    {
                        "when": "",
                        "then": {
                            "expansions": [
                                {
                                    "parent_id": "v0.0",
                                    "children": [
                                        {"concept": "static", "association": "similarity", "probability": 1.0}
                                    ],
                                },
                                {
                                    "parent_id": "t0.0",
                                    "children": [
                                        {"concept": "letters", "association": "similarity", "probability": 1.0}
                                    ],
                                },
                            ]
                        },
                    }
                ],
                "pair_judge": [
                    {
                        "when": "text 3",
                        "then": {"toxic_pairs": [{"pair_id": "v1.0|t1.0", "category": "other", "reason": "r"}]},
                    },
                    {"when": "", "then": {"toxic_pairs": []}},
                ],
                "explainer": [{"when": "", "then": {"explanation": "static and letters", "hidden_meaning": "none"}}],
            }
        )
    )

    def cmd(out: Path, store: Path) -> list[str]:
        return [
            "detect",
            "--method",
            "tag",
            "--l-max",
            "2",
            "--input",
            str(src),
            "--output",
            str(out),
            "--model",
            f"scripted:{script}?latency=0.1",
            "--cache",
            "off",
            "--no-progress",
            "--concurrency",
            "3",
            "--image-store",
            str(store),
        ]

    ref_out, ref_store = tmp_path / "ref.jsonl", tmp_path / "ref-store"
    assert main(cmd(ref_out, ref_store)) == 0
    reference = read_records(ref_out)
    assert len(reference) == N and all(r["status"] == "ok" for r in reference)
    assert sum(r["toxic"] for r in reference) == 1 and len(store_ids(ref_store)) == N // 2

    out, store = tmp_path / "out.jsonl", tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    seen = kill_at_random_points(cmd(out, store), env, out, seeds=(1, 2, 3), total=N)
    assert any(s < N for s in seen), f"no run was killed before it finished: {seen}"
    assert main(cmd(out, store)) == 0
    records = read_records(out)
    assert hashes_by_id(records, {str(store): "<store>"}) == hashes_by_id(reference, {str(ref_store): "<store>"})
    assert store_ids(store) == referenced_ids(records) & store_ids(store) == store_ids(ref_store)
    assert temp_files(tmp_path) == []
