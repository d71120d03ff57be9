"""CI's second type gate, `scripts/mypy_core.py`: mypy as a core install (no extras) would run it, in the one
environment CI has. Its parts are checked here; the whole is CI's own step (.ci/run, `make lint`)."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mypy_core", ROOT / "scripts" / "mypy_core.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_extras_modules_are_hidden_and_the_cores_are_not() -> None:
    tool = _tool()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    core = tool.core_closure(pyproject["project"]["dependencies"])
    assert {"torch", "langgraph", "langchain-core", "pydantic", "transformers"} <= core
    hidden = set(tool.hidden_modules(core))
    # The `ui`, `t2i` and `train` extras' modules (installed here by the dev extra) and the dev tools are hidden.
    assert {"fastapi", "starlette", "uvicorn", "diffusers", "trl", "peft", "pytest"} <= hidden
    assert not {"torch", "pydantic", "langchain_core", "langgraph", "transformers", "agents", "unveil"} & hidden


def test_an_import_a_core_install_cannot_resolve_is_named(tmp_path: Path) -> None:
    tool = _tool()
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "m.py").write_text("import fastapi\n\ndef f():\n    from diffusers import X\n")
    overrides = [{"module": ["diffusers.*", "diffusers"], "ignore_missing_imports": True}]
    found = tool.uncovered_imports(["tools"], {"fastapi", "diffusers"}, overrides, root=tmp_path)
    assert found == ["tools/m.py:1 fastapi"]  # diffusers is covered: a core install's mypy would pass it
