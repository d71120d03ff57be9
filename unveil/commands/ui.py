"""`unveil ui PATH`: a local web app to review a CTD dataset folder or browse detection / IPR results."""

from __future__ import annotations

import argparse
import socket
import sys

from tools.errors import CommandLineError, UnveilError
from unveil.commands.common import port_int


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `ui` subcommand."""
    p = sub.add_parser(
        "ui",
        help="open a local web app: review a CTD dataset, browse detection or IPR results",
        description="PATH is a dataset folder written by `unveil generate` (review queue), a results "
        "file of `unveil detect`/`evaluate detection` (TAG viewer) or of `unveil refine`/`evaluate "
        "ipr` (IPR trajectories). Binds 127.0.0.1; any other --host needs the access token.",
    )
    p.add_argument("path", help="dataset folder or results JSONL")
    p.add_argument("--port", type=port_int, default=8765, help="port, 1-65535 (default 8765)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1, this machine only)")
    p.add_argument("--token", help="access token (default: none on 127.0.0.1, a random one printed at start elsewhere)")
    p.add_argument(
        "--reviewer",
        help="single-user mode: reviewer name kept with decisions (default: the login name; the page can change "
        "it); with DIR/reviewers.json each reviewer signs in with their token instead",
    )
    p.add_argument(
        "--min-reviewers",
        type=int,
        default=None,
        choices=range(1, 101),
        metavar="N",
        help="reviewers needed per sample before it is decided: stored in DIR/review_policy.json the first time, "
        "for `unveil review` and Studio too; another value than the stored one is refused (default: the folder's, "
        "else 1)",
    )
    p.add_argument(
        "--review-rule",
        choices=("unanimous", "majority"),
        default=None,
        help="how several reviewers combine, stored as --min-reviewers is (default: the folder's, else unanimous: "
        "one rejection rejects)",
    )
    p.add_argument(
        "--image-store",
        help="the run's image store, for results that name images by id only (`unveil "
        "evaluate ipr`; default $UNVEIL_IMAGE_STORE or ~/.cache/unveil/images)",
    )
    p.add_argument(
        "--compare",
        metavar="FILE",
        help="a second detection results file: the page /compare puts the two runs side by side",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve the app until interrupted."""
    from tools.extras import require_extra

    require_extra("ui", "unveil ui")
    import uvicorn

    from unveil.ui import create_app

    try:
        app = create_app(
            args.path,
            host=args.host,
            token=args.token,
            reviewer=args.reviewer,
            image_store=args.image_store,
            min_reviewers=args.min_reviewers,
            review_rule=args.review_rule,
            compare_with=args.compare,
        )
    except ValueError as exc:  # unveil/ui refuses a path or flag it cannot serve with a ValueError naming it
        if isinstance(exc, UnveilError):
            raise
        raise CommandLineError(str(exc)) from exc
    token = app.state.guard.token
    sock = listen_socket(args.host, args.port)  # a busy port is said now, before any "open" line
    port = sock.getsockname()[1]
    shown = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    page = "compare" if args.compare else ""
    url = f"http://{'[' + shown + ']' if ':' in shown else shown}:{port}/{page}" + (f"?token={token}" if token else "")
    print(
        f"Unveil {app.state.kind} view of {args.path}\n  open {url}\n  (Ctrl+C stops the server)",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    return 0


def listen_socket(host: str, port: int) -> socket.socket:
    """The server's bound socket; a port already in use (or a host that cannot be bound) is one `CommandLineError`
    naming it and the flag, instead of a printed address that then fails."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a restart reuses the port
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise CommandLineError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (another server there? choose another --port)"
        ) from exc
    sock.set_inheritable(True)
    return sock
