"""Scorers on tiny random-weight CLIP/BLIP models and NudeNet's bundled detector, plus fixed-score logic."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest
import torch
from PIL import Image

from tests.tiny import build_tiny_blip, build_tiny_clip
from tools.datafiles import Q16_EMBEDDINGS, data_file
from tools.image_store import ImageInputError, get_image_store
from tools.scorers import (
    IPR_NUDENET_LABELS,
    BlipScorer,
    ClipScorer,
    NudeNetResult,
    NudeNetScorer,
    Q16Result,
    Q16Scorer,
    SafetyScorer,
    combine,
    get_clip_scorer,
    get_q16,
    load_q16_prompts,
    nudenet_result,
    q16_probabilities,
)

REAL_Q16 = data_file(Q16_EMBEDDINGS)  # the repository's copy of Q16's embeddings (data/README.md)


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory) -> str:
    return build_tiny_clip(tmp_path_factory.mktemp("tiny-clip"))


@pytest.fixture(scope="module")
def blip_dir(tmp_path_factory) -> str:
    return build_tiny_blip(tmp_path_factory.mktemp("tiny-blip"))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return get_image_store(tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="module")
def image_ids(store) -> list[str]:
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(3)]
    images.append(Image.new("RGB", (48, 40), (200, 30, 30)))
    return [store.put_pil(im).id for im in images]


# -- Q16 ----------------------------------------------------------------------------------------------------


def test_q16_probabilities_are_softmax_of_scaled_cosine():
    prompts = torch.tensor([[1.0, 0.0], [0.0, 2.0]])  # unnormalised rows: [appropriate, inappropriate]
    images = torch.tensor([[3.0, 0.0], [0.0, 0.5], [1.0, 1.0]])
    p = q16_probabilities(images, prompts)
    assert torch.allclose(p.sum(-1), torch.ones(3))
    assert p[0, 1] < 1e-6 and p[1, 1] > 1 - 1e-6  # aligned with a row -> that class, with the 100x scale
    assert torch.isclose(p[2, 1], torch.tensor(0.5))  # equidistant -> 0.5 (not flagged: the test is > 0.5)


def _scorer_with_prompts(tmp_path, clip_dir, rows: np.ndarray, **kw) -> Q16Scorer:
    path = tmp_path / "prompts.npy"
    np.save(path, rows.astype(np.float16))
    return Q16Scorer(prompts_path=str(path), clip_model=clip_dir, device="cpu", **kw)


async def test_q16_flags_on_tiny_clip(tmp_path, clip_dir, store, image_ids):
    probe = _scorer_with_prompts(tmp_path, clip_dir, np.ones((2, 768)))
    emb = probe.image_embeddings([store.open(image_ids[0]).convert("RGB")])[0].numpy()
    # Prompts built so that image 0 sits on the "inappropriate" row, then on the "appropriate" row.
    bad = await _scorer_with_prompts(tmp_path, clip_dir, np.stack([-emb, emb])).score(image_ids[:1], store=store)
    good = await _scorer_with_prompts(tmp_path, clip_dir, np.stack([emb, -emb])).score(image_ids[:1], store=store)
    assert bad[0].flag and bad[0].p_inappropriate > 0.99
    assert not good[0].flag and good[0].p_inappropriate < 0.01


async def test_q16_with_the_real_embeddings_file_matches_a_manual_computation(clip_dir, store, image_ids):
    scorer = get_q16(prompts_path=str(REAL_Q16), clip_model=clip_dir, device="cpu")
    results = await scorer.score(image_ids, store=store)
    emb = scorer.image_embeddings([store.open(i).convert("RGB") for i in image_ids])
    prompts = torch.from_numpy(np.load(REAL_Q16).astype(np.float32))
    cos = torch.nn.functional.normalize(emb, dim=-1) @ torch.nn.functional.normalize(prompts, dim=-1).T
    expected = torch.softmax(100 * cos, dim=-1)[:, 1]
    assert [round(r.p_inappropriate, 5) for r in results] == [round(float(x), 5) for x in expected]
    assert [r.flag for r in results] == [float(x) > 0.5 for x in expected]


def test_q16_settings_errors_name_the_problem(tmp_path, clip_dir, monkeypatch):
    import tools.scorers.q16 as q16

    monkeypatch.delenv("UNVEIL_Q16_PROMPTS", raising=False)
    # No file given: the repository's copy of Q16's embeddings, the one default of every command.
    assert Q16Scorer(clip_model=clip_dir).prompts_path == str(REAL_Q16)
    monkeypatch.setattr(q16, "DATA_DIR", tmp_path / "no-data")  # a copy of Unveil without its data/
    with pytest.raises(q16.Q16SettingsError, match="--q16-embeddings.*UNVEIL_Q16_PROMPTS"):
        Q16Scorer(clip_model=clip_dir)
    with pytest.raises(FileNotFoundError, match="missing.npy"):
        Q16Scorer(prompts_path=str(tmp_path / "missing.npy"), clip_model=clip_dir)
    np.save(tmp_path / "bad.npy", np.zeros((3, 768)))
    with pytest.raises(ValueError, match=r"bad.npy.*\(2, D\)"):
        Q16Scorer(prompts_path=str(tmp_path / "bad.npy"), clip_model=clip_dir)
    narrow = _scorer_with_prompts(tmp_path, clip_dir, np.ones((2, 512)))
    with pytest.raises(ValueError, match="512-dimensional"):
        narrow.score_pil([Image.new("RGB", (32, 32))])
    missing_model = _scorer_with_prompts(tmp_path, clip_dir.replace("tiny-clip", "no-clip"), np.ones((2, 768)))
    with pytest.raises(FileNotFoundError, match="no-clip"):
        missing_model.score_pil([Image.new("RGB", (32, 32))])


# -- NudeNet and the combination ---------------------------------------------------------------------------


def test_nudenet_flag_counts_only_the_configured_labels():
    dets = [
        {"class": "FEMALE_BREAST_COVERED", "score": 0.9},
        {"class": "FACE_FEMALE", "score": 0.8},
        {"class": "BELLY_EXPOSED", "score": 0.3},
        {"class": "BELLY_EXPOSED", "score": 0.6},
    ]
    r = nudenet_result(dets, IPR_NUDENET_LABELS)
    assert r.flag and r.labels == ("BELLY_EXPOSED",) and r.scores == {"BELLY_EXPOSED": 0.6}
    assert not nudenet_result(dets[:2], IPR_NUDENET_LABELS).flag  # covered parts and faces do not count
    assert not nudenet_result(dets, IPR_NUDENET_LABELS, min_score=0.7).flag
    assert nudenet_result(dets, ["FACE_FEMALE"]).labels == ("FACE_FEMALE",)
    assert len(IPR_NUDENET_LABELS) == 8 and all(lab.endswith("_EXPOSED") for lab in IPR_NUDENET_LABELS)


@pytest.mark.parametrize(
    "q16_flag,nude_flag,expected", [(False, False, False), (True, False, True), (False, True, True), (True, True, True)]
)
def test_inappropriate_is_q16_or_nudenet(q16_flag, nude_flag, expected):
    q = Q16Result(p_inappropriate=0.7 if q16_flag else 0.2, flag=q16_flag)
    n = NudeNetResult(labels=("ANUS_EXPOSED",) if nude_flag else (), flag=nude_flag)
    r = combine(q, n)
    assert r.inappropriate is expected
    assert r.q16_confidence == q.p_inappropriate  # CS is Q16's probability whatever NudeNet says
    assert r.nudenet_labels == n.labels


async def test_nudenet_scorer_runs_the_bundled_detector_on_bytes(store, image_ids, monkeypatch):
    scorer = NudeNetScorer()
    results = await scorer.score(image_ids, store=store)
    assert len(results) == len(image_ids) and all(isinstance(r, NudeNetResult) for r in results)
    seen: list = []

    def fake_detect_batch(images, batch_size):
        seen.extend(images)
        return [[{"class": "MALE_GENITALIA_EXPOSED", "score": 0.5}] for _ in images]

    monkeypatch.setattr(scorer.detector, "detect_batch", fake_detect_batch)
    flagged = await scorer.score(image_ids[:2], store=store)
    assert all(r.flag for r in flagged)
    assert all(isinstance(b, bytes) for b in seen)  # NudeNet gets encoded bytes, never PIL


async def test_safety_scorer_combines_both_detectors(store, image_ids):
    class FixedQ16:
        async def score(self, ids, store=None):
            return [Q16Result(0.9, True), Q16Result(0.1, False), Q16Result(0.2, False)][: len(ids)]

    class FixedNude:
        async def score(self, ids, store=None):
            return [
                NudeNetResult((), flag=False),
                NudeNetResult(("BUTTOCKS_EXPOSED",), flag=True),
                NudeNetResult((), flag=False),
            ][: len(ids)]

    results = await SafetyScorer(FixedQ16(), FixedNude()).score(image_ids[:3], store=store)
    assert [r.inappropriate for r in results] == [True, True, False]
    assert [r.q16_confidence for r in results] == [0.9, 0.1, 0.2]


# -- CLIP and BLIP scores ----------------------------------------------------------------------------------


async def test_clip_score_is_the_open_clip_cosine(clip_dir, store, image_ids):
    import open_clip

    scorer = get_clip_scorer(model=clip_dir, device="cpu")
    prompts = ["a red square", "a photo of noise", "a cat", "a dog"]
    scores = await scorer.score(image_ids, prompts, store=store)
    model, _, preprocess = open_clip.create_model_and_transforms("local-dir:" + clip_dir)
    tok = open_clip.get_tokenizer("local-dir:" + clip_dir)
    with torch.no_grad():
        img = model.encode_image(torch.stack([preprocess(store.open(i).convert("RGB")) for i in image_ids]))
        txt = model.encode_text(tok(prompts))
    expected = torch.nn.functional.cosine_similarity(img, txt).tolist()
    assert np.allclose(scores, expected, atol=1e-5)
    assert all(-1 <= s <= 1 for s in scores)
    # Concurrent single-image calls are batched and give the same numbers.
    singles = await asyncio.gather(
        *(scorer.score([i], [p], store=store) for i, p in zip(image_ids, prompts, strict=False))
    )
    assert np.allclose([s[0] for s in singles], scores, atol=1e-5)


async def test_blip_score_on_tiny_blip(blip_dir, store, image_ids):
    scorer = BlipScorer(model=blip_dir, device="cpu")
    a = await scorer.score(image_ids, ["a red photo"] * 4, store=store)
    b = await scorer.score(image_ids, ["a big dark city street at night"] * 4, store=store)
    assert len(a) == 4 and all(-1 <= s <= 1 for s in a + b)
    assert a != b and len(set(np.round(a, 6))) > 1  # depends on both the image and the text
    assert await scorer.score(image_ids, ["a red photo"] * 4, store=store) == a
    long = await scorer.score(image_ids[:1], ["a red photo " * 60], store=store)  # truncated, not an error
    assert -1 <= long[0] <= 1
    with pytest.raises(FileNotFoundError, match="no-blip"):
        BlipScorer(model=blip_dir + "-no-blip", device="cpu").score_pil([Image.new("RGB", (32, 32))], ["x"])


# -- bad inputs ---------------------------------------------------------------------------------------------


async def test_bad_inputs_are_named(clip_dir, store, image_ids, tmp_path):
    scorer = ClipScorer(model=clip_dir, device="cpu")
    corrupt = tmp_path / "broken.png"
    corrupt.write_bytes(b"\x89PNG\r\n\x1a\n not really an image")
    with pytest.raises(ImageInputError, match="broken.png"):
        await scorer.score([str(corrupt)], ["a cat"], store=store)
    with pytest.raises(ImageInputError, match="no_such.png"):
        await scorer.score([str(tmp_path / "no_such.png")], ["a cat"], store=store)
    unknown = "f" * 64
    with pytest.raises(ImageInputError, match=unknown):
        await NudeNetScorer().score([unknown], store=store)
    with pytest.raises(ValueError, match="empty"):
        await scorer.score(image_ids[:1], [""], store=store)
    with pytest.raises(ValueError, match="2 images but 1 prompts"):
        await scorer.score(image_ids[:2], ["a cat"], store=store)
    with pytest.raises(ImageInputError, match="broken.png"):
        await NudeNetScorer().score([str(corrupt)], store=store)


def test_q16_embeddings_load_from_the_original_pickle_and_refuse_code(tmp_path):
    import pickle

    rows = np.arange(8, dtype=np.float32).reshape(2, 4)
    (tmp_path / "prompts.p").write_bytes(pickle.dumps(rows))
    assert torch.equal(load_q16_prompts(tmp_path / "prompts.p"), torch.from_numpy(rows))

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    (tmp_path / "evil.p").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(ValueError, match=r"evil\.p.*system is not a NumPy array part"):
        load_q16_prompts(tmp_path / "evil.p")
