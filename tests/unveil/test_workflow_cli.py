"""The CI workflow through the real CLI: quality gates (`--fail-under`), spending caps on every batch command, and
the raw calls of a sample (`unveil calls`).

Models are `scripted:` files; the vanilla detector answers toxic for a text with OVERT and not toxic otherwise,
in one call per sample, so every count below can be worked out by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.gateway import set_gateway
from tests.cli_args import run_cli as main
from tools.jsonl_files import done_records

SCRIPT = Path(__file__).parent.parent / "fixtures" / "eval" / "scripts" / "detect.json"
MODEL = f"scripted:{SCRIPT}"


# The workflow (run files, gates, doctor, comparisons) is this file's subject, not the evaluations' pictures.
pytestmark = pytest.mark.usefixtures("no_pictures")


@pytest.fixture(autouse=True)
def _reset_gateway():
    yield
    set_gateway(None)


def write_pairs(path: Path, texts: list[str], *, labels: list[int] | None = None) -> Path:
    """A CTD-layout dataset (also a `detect --input` file): one pair per text, toxic unless `labels` says."""
    rows = [
        {
            "id": f"s{k}",
            "text": t,
            "image_description": "a street at night",
            "label": (labels or [1] * len(texts))[k],
            "category": "violence",
            "mtc": 0.5,
        }
        for k, t in enumerate(texts)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def evaluate_args(data: Path, out: Path, *extra: str, cache: str = "off") -> list[str]:
    """`unveil evaluate detection` of the vanilla method on `data` with the scripted detector."""
    return [
        "evaluate",
        "detection",
        "--dataset",
        f"d=ctd:{data}",
        "--methods",
        "vanilla",
        "--detectors",
        MODEL,
        "--cache",
        cache,
        "--out",
        str(out),
        "--no-progress",
        "--concurrency",
        "1",
        *extra,
    ]


# -- --fail-under -------------------------------------------------------------------------------------------
def test_fail_under_gates_the_exit_code_on_a_quality_metric(tmp_path, capsys):
    data = write_pairs(tmp_path / "d.jsonl", ["OVERT threat", "a quiet evening"])  # accuracy 0.5: one found
    assert main(evaluate_args(data, tmp_path / "a", "--fail-under", "accuracy=0.5")) == 0
    capsys.readouterr()
    rc = main(evaluate_args(data, tmp_path / "b", "--fail-under", "recall=0.4", "--fail-under", "accuracy=0.9"))
    assert rc == 3
    err = capsys.readouterr().err
    assert "fail-under: d vanilla" in err and "accuracy = 0.5000 is under 0.9" in err
    assert "recall" not in err.split("fail-under:", 1)[1]  # recall 0.5 passes its gate of 0.4


def test_fail_under_refuses_an_unknown_metric_naming_the_valid_ones(tmp_path, capsys):
    data = write_pairs(tmp_path / "d.jsonl", ["OVERT threat"])
    rc = main(evaluate_args(data, tmp_path / "out", "--fail-under", "accuracyy=0.5", "--beta", "1"))
    assert rc == 1
    err = capsys.readouterr().err
    assert "accuracy, precision, recall, f1" in err
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_fail_under_fails_when_no_configuration_has_a_value(tmp_path, capsys):
    data = write_pairs(tmp_path / "d.jsonl", ["CRASH"])  # the only sample fails: nothing is scored
    assert main(evaluate_args(data, tmp_path / "out", "--fail-under", "f2=0")) == 3
    assert "no configuration has a value" in capsys.readouterr().err


def test_failed_samples_without_gates_keep_exit_2(tmp_path):
    data = write_pairs(tmp_path / "d.jsonl", ["CRASH", "OVERT"])
    assert main(evaluate_args(data, tmp_path / "out")) == 2


def test_fail_under_on_evaluate_ipr(tmp_path, monkeypatch, capsys):
    from tests.evaluation.test_eval_ipr import ColourScorer, PaintGenerator
    from tools.t2i.registry import register_generator, unregister_generator

    store = tmp_path / "images"
    spec = register_generator("paint-gate", PaintGenerator(store))
    monkeypatch.setattr("unveil.commands.evaluate.ipr_scorer", lambda args, root: ColourScorer(store))
    prompts = tmp_path / "p.jsonl"
    rows = [{"prompt": "a bloody fight", "category": "violence"}, {"prompt": "a calm lake", "category": "violence"}]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["evaluate", "ipr", "--prompts", str(prompts), "--generator", f"sd={spec}", "--image-store", str(store)]
    base += ["--images-per-prompt", "1", "--no-progress", "--cache", "off"]
    try:
        # one of the two prompts paints a red (inappropriate) image: safe = 0.5
        assert main([*base, "--out", str(tmp_path / "a"), "--fail-under", "safe=0.5"]) == 0
        assert main([*base, "--out", str(tmp_path / "b"), "--fail-under", "safe=0.6"]) == 3
        assert "sd: safe = 0.5000 is under 0.6" in capsys.readouterr().err
        assert main([*base, "--out", str(tmp_path / "c"), "--fail-under", "ip=0.1"]) == 1
        assert "safe" in capsys.readouterr().err  # the valid names, IP's gate named as its safe share
    finally:
        unregister_generator(spec)


# -- spending caps ------------------------------------------------------------------------------------------
def detect_args(data: Path, out: Path, *extra: str, cache: str = "off") -> list[str]:
    """`unveil detect` of a JSONL with the vanilla method, one sample at a time."""
    return ["detect", "--input", str(data), "--output", str(out), "--method", "vanilla", "--model", MODEL] + [
        "--cache",
        cache,
        "--concurrency",
        "1",
        "--no-progress",
        *extra,
    ]


def test_detect_stops_at_its_call_cap_and_a_rerun_goes_on(tmp_path, capsys):
    data = write_pairs(tmp_path / "pairs.jsonl", ["OVERT a", "b", "c", "OVERT d"])
    out = tmp_path / "out.jsonl"
    # Stopped by its cap, the batch is incomplete: its own exit code (issue 45 item 3: it exited 0), the samples
    # never started listed as not run, none as "failed *".
    assert main(detect_args(data, out, "--max-calls", "1")) == 4
    assert list(done_records(out)) == ["s0"]  # samples not started are not recorded, not as failures either
    err = capsys.readouterr().err
    assert "spending cap reached: 1 model calls (--max-calls 1); rerun with a higher cap" in err
    assert "1 done, 0 failed, 3 not run, 0 already in" in err
    assert "incomplete: 3 sample(s) not run (s1, s2, s3)" in err
    assert "failed *" not in err and "failed" not in err.split("0 failed", 1)[1]
    assert main(detect_args(data, out, "--max-calls", "3")) == 4  # the earlier call counts against the cap
    assert list(done_records(out)) == ["s0", "s1", "s2"]
    assert main(detect_args(data, out)) == 0  # no cap: the rest
    assert len(done_records(out)) == 4 and all(r["status"] == "ok" for r in done_records(out).values())


def test_a_cost_cap_of_zero_starts_nothing(tmp_path, capsys):
    data = write_pairs(tmp_path / "pairs.jsonl", ["a", "b"])
    out = tmp_path / "out.jsonl"
    assert main(detect_args(data, out, "--max-cost", "0")) == 4
    assert done_records(out) == {}
    assert "spending cap reached: $0.0000 (--max-cost 0)" in capsys.readouterr().err


def test_evaluate_detection_cap_leaves_samples_not_run_not_failed(tmp_path, capsys):
    data = write_pairs(tmp_path / "d.jsonl", ["OVERT a", "b", "c"])
    out = tmp_path / "out"
    assert main(evaluate_args(data, out, "--max-calls", "2")) == 4  # not run is not failed, but incomplete
    err = capsys.readouterr().err
    assert "1 not run" in err and "incomplete: spending cap reached" in err
    (run_file,) = (out / "runs").rglob("*.jsonl")
    assert len(done_records(run_file)) == 2
    assert main(evaluate_args(data, out)) == 0
    assert len(done_records(run_file)) == 3


def test_refine_and_evaluate_ipr_take_the_caps():
    from unveil.cli import build_parser

    parser = build_parser()
    for argv in (["refine", "--input", "p.jsonl"], ["evaluate", "ipr"], ["evaluate", "detection", "--dataset", "x"]):
        args = parser.parse_args([*argv, "--max-calls", "5", "--max-cost", "1.5"])
        assert (args.max_calls, args.max_cost) == (5, 1.5)


# -- unveil calls -------------------------------------------------------------------------------------------
def test_calls_shows_each_call_of_a_sample_with_secrets_redacted(tmp_path, capsys, monkeypatch):
    secret = "sk-test-1234567890abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    data = write_pairs(tmp_path / "pairs.jsonl", [f"OVERT the key is {secret}", "b"])
    out, cache = tmp_path / "out.jsonl", str(tmp_path / "cache.sqlite")
    assert main(detect_args(data, out, cache=cache)) == 0
    assert main(detect_args(data, tmp_path / "again.jsonl", cache=cache)) == 0  # answered by the cache
    rec = done_records(out)["s0"]
    assert [c["cache_hit"] for c in rec["usage"]["calls"]] == [False]
    capsys.readouterr()

    assert main(["calls", "s0", "--results", str(out), "--cache", cache]) == 0
    shown = capsys.readouterr().out
    assert "call 1: vanilla_detector on scripted:" in shown and "cache hit: no" in shown
    assert "OVERT the key is" in shown and secret not in shown  # the message as sent, the key redacted
    assert '"toxic": true' in shown.replace("\n", " ") or '"toxic":true' in shown  # the raw answer

    assert main(["calls", "s0", "--results", str(tmp_path / "again.jsonl"), "--cache", cache, "--json"]) == 0
    (call,) = json.loads(capsys.readouterr().out)
    assert call["cache_hit"] is True and call["role"] == "vanilla_detector"
    assert call["messages"][0]["role"] == "system" and "latency_s" in call and "cost_usd" in call


def test_calls_says_why_a_sample_has_none(tmp_path, capsys):
    data = write_pairs(tmp_path / "pairs.jsonl", ["a"])
    out = tmp_path / "out.jsonl"
    assert main(detect_args(data, out, cache="off")) == 0
    assert main(["calls", "s0", "--results", str(out)]) == 1
    assert "lists no calls" in capsys.readouterr().err
    assert main(["calls", "nope", "--results", str(out)]) == 1
    assert "no sample 'nope'" in capsys.readouterr().err


# -- unveil compare -----------------------------------------------------------------------------------------
def test_compare_two_evaluation_runs_side_by_side(tmp_path, capsys):
    data = write_pairs(tmp_path / "d.jsonl", ["OVERT a", "a walk", "OVERT b", "CRASH"], labels=[1, 0, 0, 1])
    out = tmp_path / "out"
    assert main(evaluate_args(data, out, "--include-benign", "--methods", "vanilla,tag", "--l-max", "2")) == 2
    (a,) = (out / "runs").rglob("vanilla*.jsonl")
    (b,) = (out / "runs").rglob("tag*.jsonl")
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["shared"] == 3 and result["only_a"] == 0  # CRASH failed in both: not compared
    overall = result["groups"][0]
    assert overall["n"] == 3 and overall["a_accuracy"] == pytest.approx(2 / 3)  # vanilla: OVERT b is benign
    assert overall["delta_accuracy"] == pytest.approx(overall["b_accuracy"] - overall["a_accuracy"])
    assert {g["group"] for g in result["groups"]} == {"overall", "category", "bin"}
    assert result["cost"]["a"]["calls"] == 3 and result["cost"]["b"]["calls"] > 3  # one call a sample; TAG more
    assert main(["compare", str(a), str(b), "--only-disagreements"]) == 0
    shown = capsys.readouterr().out
    assert f"{result['disagreements']} verdicts differ" in shown
    listed = [ln for ln in shown.splitlines() if ln.startswith(("*", " s"))]
    assert len(listed) == result["disagreements"] and all(ln.startswith("*") for ln in listed)


def test_compare_refuses_a_file_that_is_not_detection_results(tmp_path, capsys):
    other = tmp_path / "x.jsonl"
    other.write_text(json.dumps({"id": "a", "status": "ok", "prompt": "p"}) + "\n")
    assert main(["compare", str(other), str(other)]) == 1
    assert "not a detection results file" in capsys.readouterr().err


# -- unveil list --------------------------------------------------------------------------------------------
def test_list_reads_every_table(capsys):
    from agents.guard import GUARDS
    from evaluation.datasets import FORMATS
    from tools.t2i.registry import KINDS

    assert main(["list", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    names = {section: [r["name"] for r in rows] for section, rows in table.items()}
    assert {"scripted", "transformers", "openai"} <= set(names["providers"])
    assert names["generators"] == list(KINDS)
    assert [f"guard:{g}" for g in GUARDS] == [r["spec"] for r in table["guards"]][: len(GUARDS)]
    assert set(FORMATS) <= set(names["formats"])
    assert {"tag", "vanilla", "ctd", "ipr", "guard"} <= set(names["graphs"])
    assert main(["list", "formats"]) == 0
    assert "--dataset siuo:FILE" in capsys.readouterr().out


# -- unveil doctor ------------------------------------------------------------------------------------------
def doctor(tmp_path: Path, capsys, *extra: str) -> tuple[int, dict[str, dict]]:
    """`unveil doctor --json` with a writable cache and store; its checks by name."""
    rc = main(["doctor", "--json", "--cache", str(tmp_path / "c.sqlite"), "--image-store", str(tmp_path / "s"), *extra])
    return rc, {c["name"]: c for c in json.loads(capsys.readouterr().out)}


def test_doctor_probes_each_configured_server(tmp_path, capsys, monkeypatch):
    from tests.faultserver import FaultServer

    answers = {"Probe": {"ok": True}, "text": "ok"}
    with FaultServer(answers) as good, FaultServer(answers, images_refused="model has no vision") as text_only:
        monkeypatch.setenv("UNVEIL_PAIR_JUDGE_MODEL", text_only.spec())
        rc, checks = doctor(tmp_path, capsys, "--model", good.spec(), "--timeout", "20")
    assert rc == 0  # every server gap is reported; none of them is the default run's
    good_name = f"server {good.spec()}"
    assert [checks[f"{good_name}: {w}"]["ok"] for w in ("reachable", "JSON schema", "images")] == [True] * 3
    bad = checks[f"server {text_only.spec()}: images"]
    assert not bad["ok"] and "UNVEIL_TEXT_ONLY" in bad["fix"]
    assert checks["image store"]["ok"] and checks["response cache"]["ok"]
    assert all(name in checks for name in ("chromium", "GPUs", "extra ui"))


def test_doctor_names_an_unreachable_server_and_an_unwritable_store(tmp_path, capsys):
    from tests.unveil.test_ui import free_port

    blocker = tmp_path / "s"
    blocker.write_text("a file where the store's folder should be")
    spec = f"openai:m@http://127.0.0.1:{free_port()}/v1"
    rc, checks = doctor(tmp_path, capsys, "--role-model", f"pair_judge={spec}", "--timeout", "5")
    assert rc == 1 and not checks["image store"]["ok"] and checks["image store"]["needed"]
    assert "UNVEIL_IMAGE_STORE" in checks["image store"]["fix"]
    reach = checks[f"server {spec}: reachable"]
    assert not reach["ok"] and reach["fix"]
    assert f"server {spec}: images" not in checks  # nothing more is asked of a server that is not there


# -- unveil run FILE ----------------------------------------------------------------------------------------
def write_run_file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_run_file_runs_its_jobs_records_itself_and_gates(tmp_path, capsys):
    from runner.output_identity import settings_path

    data = write_pairs(tmp_path / "d.jsonl", ["OVERT threat", "a quiet evening"])
    out = tmp_path / "det.jsonl"
    run_file = write_run_file(
        tmp_path / "run.toml",
        f"""
model = "{MODEL}"
cache = "off"
no_progress = true
concurrency = 1

[[jobs]]
name = "detect the pairs"
command = "detect"
input = "{data}"
output = "{out}"
method = "vanilla"
max_calls = 10

[[jobs]]
command = "evaluate detection"
dataset = ["d=ctd:{data}"]
methods = ["vanilla"]
detectors = ["{MODEL}"]
out = "{tmp_path / "eval"}"
fail_under = {{accuracy = 0.9, recall = 0.1}}
""",
    )
    assert main(["run", str(run_file)]) == 3  # the gravest exit of its jobs: accuracy 0.5 < 0.9
    err = capsys.readouterr().err
    assert "exit 0: detect the pairs" in err and "exit 3: job 2 (evaluate detection)" in err
    assert len(done_records(out)) == 2 and (tmp_path / "eval" / "detection.md").is_file()
    sidecar = json.loads(settings_path(out).read_text())
    digest = __import__("hashlib").sha256(run_file.read_bytes()).hexdigest()
    assert f"unveil run {run_file} (sha256 {digest}; detect the pairs)" in sidecar["command"]
    assert main(["run", str(run_file)]) == 3  # the same file reruns the run: nothing left to do
    assert "0 done, 0 failed, 2 already in" in capsys.readouterr().err


def test_run_file_reports_a_job_its_cap_stopped_as_incomplete(tmp_path, capsys):
    """Issue 45 item 3: a job stopped by `max_calls` with samples never run is incomplete, not a success."""
    data = write_pairs(tmp_path / "d.jsonl", ["OVERT threat", "a quiet evening", "b"])
    run_file = write_run_file(
        tmp_path / "run.toml",
        f"""
model = "{MODEL}"
cache = "off"
no_progress = true
concurrency = 1

[[jobs]]
name = "capped"
command = "detect"
input = "{data}"
output = "{tmp_path / "det.jsonl"}"
method = "vanilla"
max_calls = 1
""",
    )
    assert main(["run", str(run_file)]) == 4
    err = capsys.readouterr().err
    assert "exit 4: capped (incomplete:" in err and "unveil run: incomplete: capped" in err
    assert "2 not run" in err and "failed *" not in err


def test_run_file_keys_are_the_commands_flags(tmp_path):
    from unveil.cli import build_parser
    from unveil.commands.runfile import plan

    run_file = write_run_file(
        tmp_path / "run.toml",
        """
[[jobs]]
command = "evaluate detection"
dataset = ["a.json", "b.json"]
methods = ["vanilla", "tag"]
l_max_ablation = [2, 3]
include-benign = true
role_model = { pair_judge = "openai:gpt-4.1" }
max_cost = 2.5

[[jobs]]
command = "refine"
prompt = "-a prompt that starts with a dash"
t_max = 2
""",
    )
    (det, ref), _ = plan(run_file)
    cli = build_parser().parse_args(
        ["evaluate", "detection", "--dataset", "a.json", "--dataset", "b.json", "--methods", "vanilla,tag"]
        + ["--l-max-ablation", "2,3", "--include-benign", "--role-model", "pair_judge=openai:gpt-4.1"]
        + ["--max-cost", "2.5"]
    )
    assert {k: v for k, v in vars(det.args).items() if k != "command_line"} == vars(cli)
    assert ref.args.prompt == "-a prompt that starts with a dash" and ref.args.t_max == 2


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[[jobs]]\ncommand = "detect"\nmax_cots = 1\n', "unknown key(s) max_cots; `detect` takes: "),
        ('max_calls = 1\n[[jobs]]\ncommand = "list"\n', "command 'list'; expected one of detect"),
        ('fail_under = {accuracy = 1}\n[[jobs]]\ncommand = "detect"\n', "taken by none of its jobs"),
        ('[[jobs]]\ncommand = "detect"\nscreen = "yes"\n', "key 'screen': a switch"),
        ('[jobs]\ncommand = "detect"\n', "expected one or more [[jobs]] tables"),
    ],
)
def test_run_file_refuses_what_no_command_takes(tmp_path, capsys, text, said):
    assert main(["run", str(write_run_file(tmp_path / "run.toml", text))]) == 1
    err = capsys.readouterr().err
    assert said in err
    if "unknown key" in said:
        assert "max_calls" in err and "max_cost" in err  # the valid keys are listed


def test_run_dry_run_prints_the_plan_and_the_estimate(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the jobs' default outputs (runs/...) would land here
    data = write_pairs(tmp_path / "d.jsonl", ["a", "b", "c"])
    run_file = write_run_file(
        tmp_path / "run.toml",
        f"""
model = "openai:gpt-4.1"
[[jobs]]
command = "detect"
input = "{data}"
method = "vanilla"
[[jobs]]
command = "evaluate detection"
dataset = ["ctd:{data}"]
methods = ["vanilla", "tag"]
l_max = 2
""",
    )
    assert main(["run", str(run_file), "--dry-run"]) == 0
    shown = capsys.readouterr().out
    assert "vanilla: 3 samples x 1 calls = 3 calls on openai:gpt-4.1, about $0.02" in shown
    # TAG's worst case under the default reading (graphs/tag/cost.py): 4 roots a tree, l_max 2: two root calls,
    # the review, one expander call a tree and 240 new pairs in two judge calls
    assert "tag l_max=2: 3 samples x 7 calls = 21 calls" in shown
    assert "estimated: 27 model calls" in shown
    assert "warning" not in shown  # no cap
    assert not (tmp_path / "runs").exists()  # nothing ran


def test_run_dry_run_warns_over_a_cap_and_prices_each_model_at_its_rate(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = write_pairs(tmp_path / "d.jsonl", ["a", "b", "c"])
    run_file = write_run_file(
        tmp_path / "run.toml",
        f"""
model = "openai:gpt-4.1"
max_cost = 1.0
[[jobs]]
command = "detect"
input = "{data}"
[[jobs]]
command = "generate"
category = "drugs"
n = 10
out = "ctd"
blind_models = ["openai:gpt-4.1-nano"]
""",
    )
    assert main(["run", str(run_file), "--dry-run"]) == 0
    detect_job, generate_job = capsys.readouterr().out.split("\n\njob ")[1:]
    # the default reading's worst case: 143 calls and about 880k tokens a sample (docs/tag.md), $1.77 on gpt-4.1
    assert "tag: 3 samples x 143 calls = 429 calls on openai:gpt-4.1, about $5." in detect_job
    assert "warning: estimate $5." in detect_job and "exceeds --max-cost 1" in detect_job
    # the blind judges on the cheaper model, at its own rate: 10 scenes x 3 rounds x 4 judges of 1,800 tokens
    assert "ctd blind judges: 10 samples x 12 calls = 120 calls on openai:gpt-4.1-nano, about $0.03" in generate_job
    assert "ctd: 10 samples x 7 calls = 70 calls on openai:gpt-4.1, about $0.38" in generate_job
    assert "warning" not in generate_job


def test_run_dry_run_prices_tag_roles_on_their_own_models(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = write_pairs(tmp_path / "d.jsonl", ["a", "b", "c"])
    run_file = write_run_file(
        tmp_path / "run.toml",
        f"""
model = "openai:gpt-4.1"
role_model = {{ pair_judge = "openai:gpt-4.1-nano" }}
[[jobs]]
command = "detect"
input = "{data}"
""",
    )
    assert main(["run", str(run_file), "--dry-run"]) == 0
    shown = capsys.readouterr().out
    # the judge's 131 calls of the 143 (the review and the judge chunks) at the cheaper model's rate
    assert "tag (root_extractor, expander): 3 samples x 12 calls = 36 calls on openai:gpt-4.1," in shown
    assert "tag (pair_judge): 3 samples x 131 calls = 393 calls on openai:gpt-4.1-nano," in shown


def test_run_file_in_yaml(tmp_path):
    pytest.importorskip("yaml")
    from unveil.commands.runfile import plan

    run_file = write_run_file(
        tmp_path / "run.yaml",
        "model: openai:gpt-4.1\njobs:\n  - command: detect\n    method: vanilla\n    max_calls: 3\n    screen: true\n",
    )
    ((job,), _) = plan(run_file)
    assert (job.args.method, job.args.max_calls, job.args.screen, job.args.model) == (
        "vanilla",
        3,
        True,
        "openai:gpt-4.1",
    )


def test_doctor_says_to_exempt_a_loopback_server_from_the_proxy(tmp_path, capsys, monkeypatch):
    from tests.unveil.test_ui import free_port

    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    spec = f"openai:m@http://127.0.0.1:{free_port()}/v1"
    _, checks = doctor(tmp_path, capsys, "--model", spec, "--timeout", "5")
    assert "add 127.0.0.1 to NO_PROXY" in checks[f"server {spec}: reachable"]["fix"]
