"""Reviewer tokens of Studio answers, checked where they enter the graph server and never stored.

A Studio reviewer answers the CTD review pause with `{"decision": ..., "token": ...}`. The server keeps every
run's request (`runs.list` shows its `kwargs` to any client) and every checkpoint (`.langgraph_api/`), so a token
that travelled on into the run would be readable by every client of the server. The served app
(`graphs.served_app`) therefore checks each token of a resume as the request arrives (`check_resume_tokens`) and
puts the reviewer it names in its place (`checked_reviewer`: name and role, nothing secret); a bad token refuses the
request. No client may send `checked_reviewer` itself (`refuse_client_checked`), and the graph trusts it only in a
process whose served app checks the requests (`boundary_active`); a token that still reaches the graph there is
refused (a route the check missed fails instead of storing it). In-process callers (`graph.ainvoke` with a
`Command(resume=...)`) keep passing the token itself: nothing stores their requests.
"""

from __future__ import annotations

from typing import Any

from tools.review_log import review_dir
from tools.reviewers import ReviewerAuthError, authenticate, load_reviewers, server_reviewers_file

CHECKED = "checked_reviewer"  # the key the served app puts where a token was: {"name": ..., "role": ...}
_ACTIVE: list[bool] = []  # set once by the served app when the server loads it (`activate_boundary`)


def activate_boundary() -> None:
    """Say that this process is a graph server whose served app checks every request (called when it loads)."""
    if not _ACTIVE:
        _ACTIVE.append(True)


def boundary_active() -> bool:
    """Whether this process's requests are checked by the served app (so `checked_reviewer` came from it)."""
    return bool(_ACTIVE)


def refuse_client_checked(body: object) -> None:
    """Refuse (ValueError) a request body that carries `checked_reviewer` anywhere: only the check sets it."""
    if isinstance(body, dict):
        if CHECKED in body:
            raise ValueError(f"{CHECKED!r} is set by the server's token check only; send your reviewer token")
        for value in body.values():
            refuse_client_checked(value)
    elif isinstance(body, list):
        for value in body:
            refuse_client_checked(value)


def check_resume_tokens(body: object) -> tuple[object, bool]:
    """The request body with the token of every review answer in a `command.resume` replaced by the reviewer it
    names, and whether anything changed. The reviewers file is the server's (`UNVEIL_REVIEWERS_FILE`, else the
    review folder's); without one (single-user mode) a token names nobody and is dropped. A token of nobody is a
    `ReviewerAuthError` naming the answer, so the request is refused before any run records it."""
    if not _has_token(body):
        return body, False
    folder = review_dir()
    path = server_reviewers_file(folder)
    people = load_reviewers(path) if path is not None else None
    return _replace(body, people, in_resume=False), True


def _has_token(body: object, in_resume: bool = False) -> bool:
    """Whether a review answer under a `resume` key of the body carries a `token`."""
    if isinstance(body, list):
        return any(_has_token(v, in_resume) for v in body)
    if not isinstance(body, dict):
        return False
    if in_resume and "token" in body:
        return True
    return any(_has_token(v, in_resume or k == "resume") for k, v in body.items())


def _replace(body: object, people: dict[str, dict[str, Any]] | None, *, in_resume: bool) -> object:
    if isinstance(body, list):
        return [_replace(v, people, in_resume=in_resume) for v in body]
    if not isinstance(body, dict):
        return body
    if in_resume and "token" in body:
        return _checked_answer(body, people)
    return {k: _replace(v, people, in_resume=in_resume or k == "resume") for k, v in body.items()}


def _checked_answer(answer: dict[str, Any], people: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    """One answer with its token replaced by the reviewer it names (its own `reviewer` label dropped: the name is
    the reviewers file's); without a reviewers file the token is only dropped."""
    clean = {k: v for k, v in answer.items() if k not in ("token", "reviewer")}
    if people is None:
        return {**clean, **({"reviewer": answer["reviewer"]} if "reviewer" in answer else {})}
    token = answer.get("token")
    try:
        who = authenticate(people, token if isinstance(token, str) else None)
    except ReviewerAuthError as exc:
        raise ReviewerAuthError(f"review answer: {exc}; the answer was not recorded") from exc
    return {**clean, CHECKED: {"name": who.name, "role": who.role}}


def checked_reviewer(answer: dict[str, Any], people: dict[str, dict[str, Any]] | None) -> tuple[str, str] | None:
    """The (name, role) the served app put in an answer, or None when it carries none. A ValueError when it
    cannot be trusted here (no served app checks this process's requests), names a reviewer the reviewers file
    no longer has, or when a token reached the graph past the check."""
    checked = answer.get(CHECKED)
    if checked is None:
        if "token" in answer and boundary_active():
            raise ValueError("review answer: a reviewer token reached the graph unchecked; it was not accepted")
        return None
    if not boundary_active() or not isinstance(checked, dict):
        raise ValueError(f"review answer: {CHECKED!r} is set by the server's token check only; send your token")
    name = str(checked.get("name") or "")
    if people is None:
        return name, "local"
    if name not in people:
        raise ValueError(f"review answer: reviewer {name!r} is no longer in the reviewers file")
    return name, str(people[name].get("role", "reviewer"))
