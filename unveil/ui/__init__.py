"""The local web app of `unveil ui`: a review queue for CTD dataset folders, and viewers for TAG detection and
IPR results (FastAPI + server-rendered Jinja2 templates; see `unveil.ui.app`). `create_app` is imported on first
use, so the commands can use `unveil.ui.index` without the web app's extra."""

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from unveil.ui.app import create_app

        return create_app
    raise AttributeError(name)
