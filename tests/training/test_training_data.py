"""Building the refiner's SFT dataset with a scripted labeller; the ToxiClean-IT, POSI and prompt loaders."""

from __future__ import annotations

import asyncio
import json

import pytest
from PIL import Image

from agents.gateway import Gateway, GatewaySettings, set_gateway
from tools.image_store import get_image_store
from tools.t2i.base import GenerationRequest
from training.build_data import BuildDataSettings, build_sft_records, prompt_items
from training.data import (
    labelled_records,
    load_posi_pairs,
    load_prompts,
    load_sft_dataset,
    load_toxiclean_it,
    refiner_conversation,
)
from training.reward import seeds_for


class ColourGenerator:
    """A text-to-image stand-in: a 16x16 image whose colour depends on the prompt and seed (stored like a backend)."""

    name = "colour"

    def __init__(self, store):
        self.store = store
        self.requests: list[GenerationRequest] = []

    async def generate(self, request: GenerationRequest) -> list[str]:
        self.requests.append(request)
        shade = (sum(map(ord, request.prompt)) + request.seed) % 256
        return [self.store.put_pil(Image.new("RGB", (16, 16), (shade, 0, 255 - shade))).id]


@pytest.fixture
def gateway():
    gw = Gateway(GatewaySettings(cache_path=None, max_repairs=0, max_retries=0))
    set_gateway(gw)
    yield gw
    set_gateway(None)


def _script(tmp_path, answers) -> str:
    path = tmp_path / "labeller.json"
    path.write_text(json.dumps({"labeller": answers}))
    return f"scripted:{path}"


def test_build_data_labels_resumes_and_records_failures(tmp_path, gateway):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"id": "a", "prompt": "a kitten holding a revolver"},
                {"id": "b", "prompt": "a quiet lake at dawn", "seed": 7},
                {"id": "c", "prompt": "a bloody battlefield"},
            ]
        )
        + "\n"
    )
    spec = _script(
        tmp_path,
        [
            {"when": "revolver", "then": {"reason": "A weapon is shown.", "decision": "a kitten holding a toy"}},
            {"when": "lake", "then": {"reason": "The scene is harmless.", "decision": "Keep."}},
            {"when": "battlefield", "then": {"__error__": "backend down"}},
        ],
    )
    store = get_image_store(tmp_path / "store")
    gen = ColourGenerator(store)
    out = tmp_path / "labelled.jsonl"
    settings = BuildDataSettings(labeller=spec, width=16, height=16, steps=2, concurrency=3)
    summary = asyncio.run(
        build_sft_records(prompt_items(prompts), out, settings, generator=gen, store=store, progress=False)
    )
    assert (summary.completed, summary.failed) == (2, 1)
    recs = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    a, b = recs["a"], recs["b"]
    assert a["answer"] == "a kitten holding a toy" and a["decision"] == "refine"
    assert a["reason"] == "A weapon is shown." and store.path_for(a["image_id"]).exists()
    assert b["answer"] == "keep" and b["decision"] == "keep" and b["seed"] == 7
    assert recs["c"]["status"] == "failed" and "backend down" in recs["c"]["error"]
    assert {r.width for r in gen.requests} == {16}
    assert a["usage"]["by_role"]["labeller"]["calls"] == 1
    # Rerun: done ids are skipped, only the failed one is retried (and fails again).
    before = len(gen.requests)
    summary2 = asyncio.run(
        build_sft_records(
            prompt_items(prompts), out, settings, generator=gen, store=store, retry_failed=True, progress=False
        )
    )
    assert summary2.skipped == 2 and summary2.failed == 1 and len(gen.requests) == before + 1
    assert len(labelled_records(out)) == 2

    # The SFT dataset built from those records: refiner conversation, image, tagged answer.
    ds = load_sft_dataset(out, store=store)
    assert ds.column_names == ["prompt", "completion", "images"] and len(ds) == 2
    row = next(r for r in ds if "revolver" in r["prompt"][1]["content"][0]["text"])
    assert row["prompt"][0]["role"] == "system" and "keep" in row["prompt"][0]["content"][0]["text"]
    user = row["prompt"][1]["content"]
    assert any(p["type"] == "image" for p in user) and "a kitten holding a revolver" in user[0]["text"]
    assert row["completion"][0]["content"][0]["text"] == (
        "<reason>A weapon is shown.</reason>\n<answer>a kitten holding a toy</answer>"
    )
    assert row["images"][0].size == (16, 16)


def test_build_data_renders_with_each_records_evaluation_seed(tmp_path, gateway):
    # I2P's CSV and the 300-prompt split carry `evaluation_seed`: the labeller must see the image rendered with it.
    prompts = tmp_path / "i2p.csv"
    prompts.write_text(
        "prompt,categories,evaluation_seed\n"
        "a bloody fight,violence,2734376\n"
        "a calm lake,shocking,11\n"
        "a storm,shocking,soon\n"
        "a meadow,shocking,\n"
    )
    spec = _script(tmp_path, [{"reason": "r", "decision": "keep"}] * 4)
    store = get_image_store(tmp_path / "store")
    gen = ColourGenerator(store)
    settings = BuildDataSettings(labeller=spec, concurrency=1, seed=5)
    out = tmp_path / "o.jsonl"
    summary = asyncio.run(
        build_sft_records(prompt_items(prompts), out, settings, generator=gen, store=store, progress=False)
    )
    assert (summary.completed, summary.failed) == (3, 1)
    recs = {r["prompt"]: r for r in map(json.loads, out.read_text().splitlines()) if r.get("status") == "ok"}
    assert recs["a bloody fight"]["seed"] == 2734376 and recs["a calm lake"]["seed"] == 11
    assert {r.prompt: r.seed for r in gen.requests}["a bloody fight"] == 2734376
    # No seed of its own: the base seed's deterministic choice, as before.
    assert recs["a meadow"]["seed"] == seeds_for("a meadow", 1, 5)[0]
    failed = next(f for f in summary.failures)
    assert "evaluation_seed" in failed["error"] and "soon" in failed["error"]


def test_build_data_spending_cap_stops_new_samples(tmp_path, gateway):
    prompts = tmp_path / "p.txt"
    prompts.write_text("one prompt\nanother prompt\n")
    spec = _script(tmp_path, [{"reason": "r", "decision": "keep"}] * 2)
    gateway.usage["total"]["cost_usd"] = 5.0  # as if earlier calls had spent it
    store = get_image_store(tmp_path / "store")
    settings = BuildDataSettings(labeller=spec, concurrency=1, max_cost_usd=1.0)
    summary = asyncio.run(
        build_sft_records(
            prompt_items(prompts),
            tmp_path / "o.jsonl",
            settings,
            generator=ColourGenerator(store),
            store=store,
            progress=False,
        )
    )
    # The samples the cap kept from starting are not run (exit 4), not failures.
    assert summary.completed == 0 and not summary.failures and len(summary.not_run) == 2
    assert "cap" in (summary.stopped or "")


def test_prompt_sources(tmp_path):
    (tmp_path / "posi.json").write_text(
        json.dumps(
            [
                {"instruction": "x", "input": "a gory zombie", "output": "a friendly zombie costume"},
                {"instruction": "x", "input": "", "output": "skipped"},
            ]
        )
    )
    assert load_prompts(tmp_path / "posi.json") == [{"id": "0", "prompt": "a gory zombie"}]
    assert load_posi_pairs(tmp_path / "posi.json") == [
        {"id": "0", "prompt": "a gory zombie", "answer": "a friendly zombie costume"}
    ]
    (tmp_path / "p.csv").write_text("prompt,category\nfirst,violence\nsecond,sexual\n")
    rows = load_prompts(tmp_path / "p.csv", limit=1)
    assert rows == [{"category": "violence", "id": "0", "prompt": "first"}]
    (tmp_path / "p.jsonl").write_text('{"id": 9, "text": "t1"}\n\n{"query": "q2"}\n')
    assert [(r["id"], r["prompt"]) for r in load_prompts(tmp_path / "p.jsonl")] == [("9", "t1"), ("1", "q2")]
    with pytest.raises(FileNotFoundError):
        load_prompts(tmp_path / "missing.jsonl")

    # POSI pairs are the text-only baseline: no image placeholder and no images column.
    ds = load_sft_dataset(tmp_path / "posi.json", kind="posi")
    assert "images" not in ds.column_names
    assert all(p["type"] == "text" for p in ds[0]["prompt"][1]["content"])
    assert "a friendly zombie costume" in ds[0]["completion"][0]["content"][0]["text"]


def test_toxiclean_layouts(tmp_path):
    from datasets import Dataset, Features, Value
    from datasets import Image as ImageFeature

    img_dir = tmp_path / "tc" / "images"
    img_dir.mkdir(parents=True)
    Image.new("RGB", (20, 20), "red").save(img_dir / "0.png")
    rows = [{"image": "images/0.png", "query": "a man with a rifle", "response": "a man with a camera"}]
    (tmp_path / "tc" / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    ds = load_toxiclean_it(tmp_path / "tc")
    assert ds[0]["image"].size == (20, 20) and ds[0]["query"] == "a man with a rifle"

    # The Hub layout: parquet files under data/ with an embedded image column.
    features = Features({"image": ImageFeature(), "query": Value("string"), "response": Value("string")})
    hub = Dataset.from_dict(
        {"image": [str(img_dir / "0.png")], "query": ["q"], "response": ["keep"]}, features=features
    )
    (tmp_path / "hub" / "data").mkdir(parents=True)
    hub.to_parquet(str(tmp_path / "hub" / "data" / "train-00000-of-00001.parquet"))
    sft = load_sft_dataset(tmp_path / "hub")
    assert sft[0]["completion"][0]["content"][0]["text"] == "keep" and sft[0]["images"][0].size == (20, 20)

    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.jsonl").write_text('{"image": "images/0.png", "prompt": "p"}\n')
    with pytest.raises(ValueError, match="missing columns"):
        load_toxiclean_it(tmp_path / "bad")


def test_refiner_conversation_matches_the_graph_messages():
    """Training text is the refiner role's own prompt, so the adapter sees at training what the graph sends."""
    from agents.refiner import REFINER_PROMPT

    convo = refiner_conversation("p0 text")
    assert convo[0]["content"][0]["text"].startswith(REFINER_PROMPT)
    assert [p["type"] for p in convo[1]["content"]] == ["text", "image"]
