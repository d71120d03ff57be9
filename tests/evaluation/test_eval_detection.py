"""Detection evaluation end to end on a tiny dataset with scripted detector models."""

import csv
import json
from pathlib import Path

import pytest

from agents.gateway import Gateway, GatewaySettings, get_gateway, set_gateway
from evaluation.datasets import load_detection
from evaluation.detection import DetectionSettings, evaluate_detection

SCRIPT = Path(__file__).parent.parent / "fixtures" / "eval" / "scripts" / "detect.json"

SAMPLES = [
    {"id": "overt", "text": "OVERT threat in plain words", "image_description": "a fist", "label": 1},
    {
        "id": "one-hop",
        "text": "LAYER1 fresh batch, text the usual number",
        "image_description": "white powder",
        "label": 1,
    },
    {"id": "two-hop", "text": "LAYER2 it will all be over soon", "image_description": "a bottle", "label": 1},
    {"id": "calm", "text": "a calm day at the park", "image_description": "a picnic", "label": 0},
    {"id": "crash", "text": "CRASH a calm evening", "image_description": "a lamp", "label": 0},
]


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "data" / "ctd.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(s) + "\n" for s in SAMPLES) + '{"id": "no-text", "label": 1}\n')
    return path


@pytest.fixture
def gateway(tmp_path):
    gw = Gateway(GatewaySettings(cache_path=str(tmp_path / "cache.sqlite"), max_repairs=0, max_retries=0))
    set_gateway(gw)
    yield gw
    set_gateway(None)


def _rows(out: Path, name: str):
    with (out / f"{name}.csv").open() as fh:
        return list(csv.DictReader(fh))


async def test_vanilla_vs_tag_tables_plots_and_rerun(dataset, gateway, tmp_path):
    items = load_detection(dataset, "ctd")
    spec = f"scripted:{SCRIPT}"
    # The bins' reference is the same scripted detector run once apart (a self-reference, fine for checking the
    # tables; tests/evaluation/test_eval_mtc_reference.py shows why a real evaluation must use another model).
    settings = DetectionSettings(
        methods=["vanilla", "tag"],
        models=[spec],
        l_max=4,
        l_max_ablation=[2, 3],
        image_store=str(tmp_path / "images"),
        concurrency=3,
        progress=False,
        include_benign=True,
        mtc_reference=spec,
    )
    out = tmp_path / "out"
    result = await evaluate_detection({"toy": items}, settings, out)

    by = {(r["method"], r["l_max"], r["bin"]): r for r in result["rows"]}
    # TA-CTD at l_max=4 finds the overt (MTC 0), one-hop (MTC 0.75) and two-hop (MTC 0.9375) samples.
    assert by[("tag", 4, "overall")]["accuracy"] == pytest.approx(1.0)
    assert by[("tag", 4, "low")]["n"] == 1 and by[("tag", 4, "medium")]["n"] == 1
    # high holds two-hop (toxic) and the benign samples (MTC 1 when nothing is found)
    assert by[("tag", 4, "high")]["n"] == 3
    # Vanilla only sees the overt one: TP 1, FN 2, and its crashed sample is counted as failed, not scored.
    v = by[("vanilla", None, "overall")]
    assert (v["tp"], v["fn"], v["fp"], v["tn"]) == (1, 2, 0, 1)
    assert v["accuracy"] == pytest.approx(0.5)
    assert v["f2"] == pytest.approx(5 * 1 / (5 * 1 + 4 * 2))
    assert v["failed"] == 2  # the crash and the record without text
    assert by[("vanilla", None, "medium")]["accuracy"] == 0.0
    # l_max ablation: depth 2 (roots + one layer) misses the two-hop sample, depth 3 finds it.
    assert by[("tag", 2, "high")]["tp"] == 0 and by[("tag", 3, "high")]["tp"] == 1
    assert by[("tag", 2, "medium")]["tp"] == 1
    # every row carries model specs, settings and cost
    row = by[("tag", 3, "overall")]
    assert json.loads(row["settings"])["l_max"] == 3 and SCRIPT.name in row["models"]
    assert by[("tag", 4, "overall")]["calls"] > 0 and "cost_usd" in row
    # the shallower runs repeat the deeper run's first calls, which the gateway serves from its cache
    assert row["cache_hits"] > 0

    failures = {(f["config"], f["id"]): f["error"] for f in result["failures"]}
    assert "backend down" in failures[("vanilla", "crash")]
    assert "text" in failures[("vanilla", "no-text")]

    hist = {b["lo"]: b["count"] for b in result["histograms"]["toy"]}
    assert hist[0.0] == 1 and hist[0.6] == 1 and hist[0.8] == 1

    for name in ("detection_main", "detection_lmax", "confusion", "mtc_histogram", "failures", "detection_rows"):
        assert (out / f"{name}.csv").stat().st_size > 0 and (out / f"{name}.md").exists()
    main = _rows(out, "detection_main")
    assert {r["method"] for r in main} == {"vanilla", "tag"}
    assert (out / "plots" / "mtc_histogram.png").read_bytes()[:4] == b"\x89PNG"
    assert len(list((out / "plots").glob("confusion_*.png"))) == 4
    assert "Vanilla vs TA-CTD" in (out / "detection.md").read_text()

    # A rerun recomputes nothing: every sample is already in its run file, so no model is called at all.
    before = get_gateway().usage["total"]["calls"], get_gateway().usage["total"]["cache_hits"]
    again = await evaluate_detection({"toy": items}, settings, out)
    after = get_gateway().usage["total"]["calls"], get_gateway().usage["total"]["cache_hits"]
    assert after == before
    assert [r["accuracy"] for r in again["rows"]] == pytest.approx([r["accuracy"] for r in result["rows"]], nan_ok=True)


@pytest.mark.usefixtures("no_pictures")
async def test_lost_run_files_are_served_from_the_cache(dataset, gateway, tmp_path):
    items = [it for it in load_detection(dataset, "ctd") if it.id in ("overt", "calm")]
    spec = f"scripted:{SCRIPT}"
    settings = DetectionSettings(
        methods=["vanilla"], models=[spec], image_store=str(tmp_path / "images"), progress=False, include_benign=True
    )
    await evaluate_detection({"toy": items}, settings, tmp_path / "a")
    calls = get_gateway().usage["total"]["calls"]
    assert calls == 2
    await evaluate_detection({"toy": items}, settings, tmp_path / "b")  # fresh output folder, same cache
    assert get_gateway().usage["total"]["calls"] == calls
    assert get_gateway().usage["total"]["cache_hits"] == 2


@pytest.mark.usefixtures("no_pictures")
async def test_rows_record_the_tag_reading_and_a_rerun_with_another_is_refused(dataset, gateway, tmp_path):
    from runner.output_identity import OutputSettingsError

    items = load_detection(dataset, "ctd")
    spec = f"scripted:{SCRIPT}"
    out = tmp_path / "out"

    def settings(**reading: str) -> DetectionSettings:
        return DetectionSettings(
            methods=["vanilla", "tag"],
            models=[spec],
            l_max=2,
            image_store=str(tmp_path / "images"),
            progress=False,
            reading=dict(reading),
        )

    result = await evaluate_detection({"toy": items}, settings(), out)
    tag = next(r for r in result["rows"] if r["method"] == "tag")
    assert (tag["prune"], tag["roots_mode"], tag["l_max"], tag["k_max"], tag["children_per_parent"]) == (
        "per_node",
        "separate",
        2,
        6,
        3,
    )
    assert json.loads(tag["settings"])["prune"] == "per_node"
    vanilla = next(r for r in result["rows"] if r["method"] == "vanilla")
    assert vanilla["prune"] is None  # vanilla builds no TAG
    main = {r["method"]: r for r in _rows(out, "detection_main")}
    assert main["tag"]["prune"] == "per_node" and main["tag"]["roots_mode"] == "separate"
    assert "prune=per_node, roots_mode=separate, l_max=2, k_max=6, children=3" in (out / "detection.md").read_text()
    (run_file,) = (out / "runs" / "toy").glob("tag*.jsonl")
    ok = [r for r in map(json.loads, run_file.read_text().splitlines()) if r.get("status", "ok") == "ok"]
    assert ok and all(r["tag_reading"]["prune"] == "per_node" for r in ok)
    with pytest.raises(OutputSettingsError, match="prune"):
        await evaluate_detection({"toy": items}, settings(prune="per_layer"), out)
