"""The conformance suite every registered model provider passes (`agents.providers.profiles.PROFILES`).

For each provider: its profile is complete and consistent and its module offers what `ProviderModule` asks for; its
builder accepts a spec; an option it does not take is refused with an `UnveilError` that names the option; and a
provider that answers offline (scripted, the embedded SmolLM2 through transformers or llama.cpp, a tiny random-weight
VLM, an OpenAI-compatible server on loopback) answers one structured call through the gateway. A provider added
to the registry is run here as is; a fake one missing a fact or a function fails by name.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agents.faults import StructuredOutputError
from agents.gateway import Gateway, GatewaySettings
from agents.limits import BackendLimits
from agents.providers.profiles import (
    LANGCHAIN_MODULE,
    PROFILES,
    ProviderProfile,
    ProviderProfileError,
    UnknownProviderError,
    is_demo_spec,
    known_providers,
    provider_profile,
)
from agents.providers.registry import build_local_chat_model, model_fingerprint, supports_images
from agents.spec import DEFAULT_SPEC, ModelSpec
from agents.usage import cost_of
from tests.faultserver import FaultServer
from tools.errors import UnveilError

ROOT = Path(__file__).resolve().parents[2]
NAMES = list(PROFILES)
# What `ProviderModule` asks of a provider's module: the function names and their parameters.
MODULE_API = {
    "build_chat_model": ["spec", "role", "shared"],
    "model_fingerprint": ["spec"],
    "check_options": ["spec"],
}
# Unveil's own providers answer offline from these specs (a LangChain provider is reached on a loopback URL).
OFFLINE = ("scripted", "transformers", "llamacpp", "hf")
SLOW_CALLS = {"transformers"}  # the embedded model through transformers takes a while on CPU


class Conformance(BaseModel):
    """The answer of the structured call every offline provider is asked for."""

    ok: bool


def conformance_problems(profile: ProviderProfile) -> list[str]:
    """What keeps a profile and its module from conforming, each naming the field or function."""
    problems = [f"{field}: {what}" for field, what in profile.problems()]
    try:
        module = importlib.import_module(profile.module)
    except ImportError as exc:
        return [*problems, f"module: {profile.module} does not import ({exc})"]
    for name, params in MODULE_API.items():
        func = getattr(module, name, None)
        if not callable(func):
            problems.append(f"{profile.module}.{name}: missing")
        elif list(inspect.signature(func).parameters) != params:
            problems.append(f"{profile.module}.{name}: takes {list(inspect.signature(func).parameters)}, not {params}")
    return problems


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.tiny_vlm import build_tiny_qwen_vl

    return build_tiny_qwen_vl(tmp_path_factory.mktemp("tiny-qwen"))


def offline_spec(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A spec of an own provider that builds without the network (a new own provider adds its line here)."""
    if name == "scripted":
        script = tmp_path / "conformance.json"
        script.write_text(json.dumps({"conformance": [{"ok": True}]}), encoding="utf-8")
        return f"scripted:{script}"
    if name in ("transformers", "llamacpp"):
        return f"{name}:smollm2"
    if name == "hf":
        pytest.importorskip("transformers")
        return f"hf:{request.getfixturevalue('tiny_qwen')}?max_new_tokens=8"
    raise AssertionError(f"provider {name!r}: no offline spec for the conformance suite; add one to offline_spec")


def langchain_spec(name: str) -> str:
    """A spec of a LangChain provider aimed at a closed loopback port (nothing is sent when it is built)."""
    from langchain.chat_models import base

    package = getattr(base, "_BUILTIN_PROVIDERS", {}).get(name, ("langchain_" + name,))[0].split(".")[0]
    pytest.importorskip(package, reason=f"provider {name!r} needs {package}")
    return f"{name}:conformance-model@http://127.0.0.1:9/v1"


def spec_for(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A spec of the provider that builds here."""
    if PROFILES[name].module == LANGCHAIN_MODULE:
        return langchain_spec(name)
    return offline_spec(name, tmp_path, request)


@pytest.mark.parametrize("name", NAMES)
def test_the_profile_is_complete_and_consistent(name: str) -> None:
    profile = PROFILES[name]
    assert profile.name == name
    assert conformance_problems(profile) == []
    # Every module reads this one profile: limits, images, costs, fingerprints and the demo predicate agree with it.
    limit = BackendLimits(max_concurrency=5)._limit_for(f"{name}@http://127.0.0.1:9/v1")
    assert limit == (profile.max_concurrency or 5)
    assert supports_images(ModelSpec(name, "m")) == profile.images
    assert cost_of(name, "m", 10**6, 10**6) == 0.0  # no price for an unknown model; a free provider has none at all
    for model, (inp, out) in profile.prices.items():
        assert cost_of(name, model, 10**6, 10**6) == pytest.approx(inp + out)
    if profile.fingerprint == "name":
        assert model_fingerprint(ModelSpec(name, "m")) == ""
    assert all(is_demo_spec(f"{name}:{model}") for model in profile.demo_models)
    assert name in known_providers()


@pytest.mark.parametrize("name", NAMES)
def test_the_builder_accepts_a_spec(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    spec = ModelSpec.parse(spec_for(name, tmp_path, request))
    if name == "llamacpp":
        pytest.importorskip("llama_cpp")
    model = build_local_chat_model(spec, "conformance", {})
    assert hasattr(model, "ainvoke") and hasattr(model, "with_structured_output")


@pytest.mark.parametrize("name", [n for n in NAMES if PROFILES[n].options is not None])
def test_an_option_the_provider_does_not_take_is_refused_by_name(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    spec = spec_for(name, tmp_path, request)
    bad = f"{spec}{'&' if '?' in spec else '?'}no_such_option=1"
    with pytest.raises(UnveilError, match="no_such_option"):
        build_local_chat_model(ModelSpec.parse(bad), "conformance", {})


def test_a_provider_only_langchain_knows_gets_the_generic_remote_profile_and_an_unknown_one_is_refused() -> None:
    generic = provider_profile("fireworks")
    assert generic.via_langchain and generic.max_concurrency is None and not generic.in_process
    with pytest.raises(UnknownProviderError, match="'nosuch'"):
        build_local_chat_model(ModelSpec.parse("nosuch:model"), "x", {})
    assert ModelSpec.parse(DEFAULT_SPEC).provider in PROFILES


def test_a_fake_provider_missing_a_fact_or_a_function_fails_by_name() -> None:
    facts: dict[str, Any] = {
        "name": "fake",
        "module": "agents.providers.json_salvage",  # a module without the provider functions
        "structured_method": "function_calling",
        "images": False,
        "in_process": True,
        "free": True,
        "fingerprint": "files",
        "model_files": "model",
        "options": (),
    }
    with pytest.raises(TypeError, match="max_concurrency"):  # a forgotten concurrency limit never builds
        ProviderProfile(**facts)
    with pytest.raises(ProviderProfileError, match="'fake': max_concurrency"):
        ProviderProfile(**facts, max_concurrency=0)
    with pytest.raises(ProviderProfileError, match="'fake': engine_hosted"):
        remote = {
            **facts,
            "in_process": False,
            "module": LANGCHAIN_MODULE,
            "fingerprint": "name",
            "model_files": "none",
        }
        ProviderProfile(**remote, max_concurrency=None, engine_hosted=True)
    problems = conformance_problems(ProviderProfile(**facts, max_concurrency=1))
    assert problems == [f"agents.providers.json_salvage.{name}: missing" for name in MODULE_API]


def in_a_fresh_process(test_id: str) -> bool:
    """Run one test of this module in a new interpreter and assert it passed; True in that child.

    Why: after long suites in one pytest process the in-process SmolLM2 has been seen to answer garbage that its
    grammar then rejects (see tests/agents/test_transformers_lm.py); the model itself is what is checked here."""
    marker = "TEST_PROVIDER_CONFORMANCE_CHILD"
    if os.environ.get(marker):
        return True
    env = {**os.environ, marker: "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{__file__}::{test_id}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return False


def _call_params() -> list[Any]:
    offline = [n for n in NAMES if n in OFFLINE]
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_CALLS else n for n in offline]


def _messages() -> list[Any]:
    from langchain_core.messages import HumanMessage, SystemMessage

    return [SystemMessage(content="Answer with ok set to true."), HumanMessage(content="Is this a test?")]


@pytest.mark.parametrize("name", _call_params())
async def test_an_offline_provider_answers_one_structured_call_through_the_gateway(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if name == "llamacpp":
        pytest.importorskip("llama_cpp")
    if name == "transformers":
        pytest.importorskip("xgrammar")
        if not in_a_fresh_process(f"test_an_offline_provider_answers_one_structured_call_through_the_gateway[{name}]"):
            return
    spec = spec_for(name, tmp_path, request)
    gateway = Gateway(GatewaySettings(cache_path=None, max_repairs=0, backoff_base=0.01))
    if name == "hf":
        # Random weights write random words: the call must come back as the gateway's own error, raw answer kept.
        try:
            result = await gateway.structured(role="conformance", spec=spec, schema=Conformance, messages=_messages())
        except StructuredOutputError as exc:
            assert exc.role == "conformance" and isinstance(exc.raw, str)
            return
    else:
        result = await gateway.structured(role="conformance", spec=spec, schema=Conformance, messages=_messages())
    assert isinstance(result.value, Conformance)
    assert result.usage["by_role"]["conformance"]["calls"] == 1
    if name == "scripted":
        assert result.value.ok is True


async def test_a_local_openai_compatible_server_answers_one_structured_call_through_the_gateway() -> None:
    with FaultServer({"Conformance": {"ok": True}}) as server:
        gateway = Gateway(GatewaySettings(cache_path=None, max_repairs=0, backoff_base=0.01))
        result = await gateway.structured(
            role="conformance", spec=server.spec(), schema=Conformance, messages=_messages()
        )
    assert result.value == Conformance(ok=True)
    assert server.bodies and server.bodies[0]["response_format"]["type"] == PROFILES["openai"].structured_method
