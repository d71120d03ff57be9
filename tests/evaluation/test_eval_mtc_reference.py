"""Covertness bins come from one fixed reference, never from the detector being scored.

The scripted detector (fixtures/eval/scripts/detect.json) finds OVERT at the roots (MTC 0), LAYER1 one layer down
(0.75), LAYER2 two layers down (0.9375) and nothing else (MTC 1). On toxic-only data, binning by its own MTC puts
every sample it found below 0.8 and every sample it missed at 1: Low and Medium accuracy are 1.0 by construction.
A fixed reference that puts two of its misses into Low and Medium gives the true 0.5.
"""

import json
from pathlib import Path

import pytest

from agents.gateway import Gateway, GatewaySettings, get_gateway, set_gateway
from evaluation.datasets import load_detection
from evaluation.detection import DetectionSettings, MtcReferenceError, evaluate_detection

# The bins are this file's subject, not the pictures: its 13 evaluations would write about 60 PNGs (8 s).
pytestmark = pytest.mark.usefixtures("no_pictures")

SCRIPT = Path(__file__).parent.parent / "fixtures" / "eval" / "scripts" / "detect.json"
SPEC = f"scripted:{SCRIPT}"

SAMPLES = [  # all toxic (Tables 1-2), plus one benign sample that the default leaves out
    {"id": "overt", "text": "OVERT threat in plain words", "image_description": "a fist", "label": 1},
    {"id": "one-hop", "text": "LAYER1 fresh batch, text the usual number", "image_description": "powder", "label": 1},
    {"id": "two-hop", "text": "LAYER2 it will all be over soon", "image_description": "a bottle", "label": 1},
    {"id": "missed-a", "text": "a quiet word about the parcel", "image_description": "a box", "label": 1},
    {"id": "missed-b", "text": "the usual place at nine", "image_description": "a bench", "label": 1},
    {"id": "calm", "text": "a calm day at the park", "image_description": "a picnic", "label": 0},
]
# What a fixed reference (another detector's TA-CTD run) assigned: one found and one missed sample per low bin.
REFERENCE = {"overt": 0.1, "missed-a": 0.1, "one-hop": 0.5, "missed-b": 0.5, "two-hop": 0.9}


@pytest.fixture
def gateway(tmp_path):
    gw = Gateway(GatewaySettings(cache_path=str(tmp_path / "cache.sqlite"), max_repairs=0, max_retries=0))
    set_gateway(gw)
    yield gw
    set_gateway(None)


@pytest.fixture
def items(tmp_path):
    path = tmp_path / "data" / "toy.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(s) + "\n" for s in SAMPLES))
    return load_detection(path, "ctd")


@pytest.fixture
def reference_run(tmp_path):
    path = tmp_path / "reference.jsonl"  # the shape of a run file: id, status, mtc (and a failed sample)
    lines = [{"id": k, "status": "ok", "mtc": v} for k, v in REFERENCE.items()]
    lines.append({"id": "calm", "status": "failed", "error": "backend down"})
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def _by(result):
    return {(r["method"], r["bin"]): r for r in result["rows"]}


def _settings(tmp_path, **kw):
    return DetectionSettings(
        methods=["vanilla", "tag"], models=[SPEC], l_max=4, image_store=str(tmp_path / "img"), progress=False, **kw
    )


async def test_own_mtc_makes_low_and_medium_perfect_and_a_fixed_reference_does_not(
    items, gateway, reference_run, tmp_path, capsys
):
    # The biased reading: bins from the scored detector's own TA-CTD (here named as the reference).
    own = _by(await evaluate_detection({"toy": items}, _settings(tmp_path, mtc_reference=SPEC), tmp_path / "own"))
    assert "also a scored detector" in capsys.readouterr().err  # the run warns that the table is biased
    assert own[("tag", "low")]["accuracy"] == 1.0 and own[("tag", "medium")]["accuracy"] == 1.0
    assert own[("tag", "high")]["n"] == 3 and own[("tag", "high")]["accuracy"] == pytest.approx(1 / 3)

    # The fixed reference: the same predictions, binned by the reference's MTC, give the true per-bin accuracy.
    fixed = _by(
        await evaluate_detection(
            {"toy": items}, _settings(tmp_path, mtc_from={"": str(reference_run)}), tmp_path / "fixed"
        )
    )
    assert fixed[("tag", "low")]["accuracy"] == 0.5 and fixed[("tag", "medium")]["accuracy"] == 0.5
    assert fixed[("tag", "high")]["accuracy"] == 1.0
    # the overall score does not depend on the bins
    assert fixed[("tag", "overall")]["accuracy"] == own[("tag", "overall")]["accuracy"] == pytest.approx(3 / 5)
    # one reference for every method: vanilla is binned over the same samples
    for b in ("low", "medium", "high"):
        assert fixed[("vanilla", b)]["n"] == fixed[("tag", b)]["n"] == 2 - (b == "high")
    # toxic only by default (Tables 1-2): the benign sample is not scored
    assert fixed[("tag", "overall")]["n"] == 5 and fixed[("tag", "overall")]["tn"] == 0
    assert "the run file" in (tmp_path / "fixed" / "detection.md").read_text()


async def test_a_reference_detector_runs_once_and_serves_every_detector(items, gateway, tmp_path):
    out = tmp_path / "out"
    settings = _settings(tmp_path, mtc_reference=SPEC, include_benign=True)
    settings.models = [SPEC, SPEC + "?latency=0"]  # two detector specs, one reference
    result = await evaluate_detection({"toy": items}, settings, out)
    (ref_file,) = (out / "runs" / "toy").glob("mtc-reference_*.jsonl")
    assert len(ref_file.read_text().splitlines()) == len(SAMPLES)
    rows = {(r["detector"], r["method"], r["bin"]): r["n"] for r in result["rows"]}
    for b in ("low", "medium", "high", "overall"):
        assert rows[(SPEC, "tag", b)] == rows[(SPEC + "?latency=0", "tag", b)] == rows[(SPEC, "vanilla", b)]
    assert rows[(SPEC, "tag", "overall")] == 6  # the benign sample is in with include_benign
    assert "reference detector" in result["mtc_sources"]["toy"]
    # a rerun reads the reference file back: no model call at all
    calls = get_gateway().usage["total"]["calls"]
    await evaluate_detection({"toy": items}, settings, out)
    assert get_gateway().usage["total"]["calls"] == calls


async def test_without_a_reference_nothing_is_binned(items, gateway, tmp_path, capsys):
    result = await evaluate_detection({"toy": items}, _settings(tmp_path), tmp_path / "out")
    by = _by(result)
    assert all(by[(m, b)]["n"] == 0 for m in ("tag", "vanilla") for b in ("low", "medium", "high"))
    assert by[("tag", "overall")]["n"] == 5
    assert "no reference MTC" in capsys.readouterr().err


async def test_a_run_without_mtc_is_refused(items, gateway, tmp_path):
    bad = tmp_path / "vanilla.jsonl"
    bad.write_text(json.dumps({"id": "overt", "status": "ok", "toxic": True}) + "\n")
    with pytest.raises(MtcReferenceError, match="no record has an `mtc`"):
        await evaluate_detection({"toy": items}, _settings(tmp_path, mtc_from={"toy": str(bad)}), tmp_path / "o")


async def test_a_run_file_of_the_scored_detector_is_flagged_as_its_own_reference(
    items, gateway, reference_run, tmp_path, capsys
):
    # The scored detector's own TA-CTD run file, named as --mtc-from: same method, same models.
    first = tmp_path / "first"
    await evaluate_detection({"toy": items}, _settings(tmp_path), first)
    (own_run,) = (first / "runs" / "toy").glob("tag-*.jsonl")
    capsys.readouterr()
    result = await evaluate_detection(
        {"toy": items}, _settings(tmp_path, mtc_from={"": str(own_run)}), tmp_path / "own"
    )
    err = capsys.readouterr().err
    assert "warning" in err and "also a scored detector" in err and SPEC in err
    assert "WARNING" in result["mtc_sources"]["toy"]
    assert "WARNING" in (tmp_path / "own" / "detection.md").read_text()
    # A run of another detector (its records name other models, or none) is no self-reference.
    other = tmp_path / "other.jsonl"
    other.write_text(
        "".join(
            json.dumps({"id": k, "status": "ok", "mtc": v, "models": {"model": "scripted:elsewhere"}}) + "\n"
            for k, v in REFERENCE.items()
        )
    )
    for path in (other, reference_run):
        result = await evaluate_detection(
            {"toy": items}, _settings(tmp_path, mtc_from={"": str(path)}), tmp_path / path.stem
        )
        assert "also a scored detector" not in capsys.readouterr().err
        assert "WARNING" not in result["mtc_sources"]["toy"]


@pytest.mark.parametrize("reference, flagged", [(SPEC, True), ("scripted:another-detector.json", False)])
async def test_a_datasets_mtc_from_the_scored_detector_is_flagged(gateway, tmp_path, capsys, reference, flagged):
    # A CTD export records which detector assigned each sample's mtc (`mtc_reference`, see runner/ctd.py).
    path = tmp_path / "data" / "ctd.jsonl"
    path.parent.mkdir()
    path.write_text(
        "".join(
            json.dumps(
                {**s, "mtc": REFERENCE.get(s["id"], 1.0), "mtc_reference": {"model": reference, "method": "tag"}}
            )
            + "\n"
            for s in SAMPLES
        )
    )
    result = await evaluate_detection({"ctd": load_detection(path, "ctd")}, _settings(tmp_path), tmp_path / "o")
    assert ("also a scored detector" in capsys.readouterr().err) is flagged
    assert ("WARNING" in result["mtc_sources"]["ctd"]) is flagged
