"""`unveil roles`: print every role's output schema, for writing `scripted:` answer files."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `roles` subcommand."""
    p = sub.add_parser("roles", help="print each role's output schema (for scripted answer files)")
    p.add_argument("role", nargs="?", help="only this role")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the schemas."""
    from agents.roles import role_schemas, text_roles

    schemas = role_schemas()
    free_text = text_roles()
    if args.role:
        schemas = {k: v for k, v in schemas.items() if args.role in k}
        free_text = {k: v for k, v in text_roles().items() if args.role in k}
        if not schemas and not free_text:
            names = ", ".join(sorted({*role_schemas(), *text_roles()}))
            print(f"unveil roles: no role matches {args.role!r}; the roles: {names}", file=sys.stderr)
            return 1
    print(json.dumps({"structured": schemas, "free_text": free_text}, indent=2))
    return 0
