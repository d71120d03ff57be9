"""The local web app of `unveil ui`: a review queue for CTD dataset folders, and viewers for TAG detection and
IPR results (FastAPI + server-rendered Jinja2 templates; see `unveil.ui.app`)."""

from unveil.ui.app import create_app

__all__ = ["create_app"]
