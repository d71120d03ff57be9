"""The app `langgraph.json` serves beside the graphs (`http.app`): the request checks of `graphs.server_boundary`.

Only the graph server imports this module (building the app marks its process as one whose requests are checked);
tests and other code import `graphs.server_boundary`.
"""

from __future__ import annotations

from graphs.server_boundary import build_app

app = build_app()
