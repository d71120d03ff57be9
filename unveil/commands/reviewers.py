"""`unveil reviewers`: the reviewers of a CTD dataset folder, each with a token of their own (see `tools.reviewers`).

`add` prints the new reviewer's token once (only its SHA-256 is stored); `list` shows names and roles; `remove`
takes a reviewer's token away (their decisions stay in the history).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.errors import MissingFileError
from tools.review_policy import RULES, load_policy, policy_path, record_policy, resolve_policy
from unveil.commands.common import bounded_int


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `reviewers` subcommand and its verbs."""
    p = sub.add_parser(
        "reviewers",
        help="manage the reviewers of a CTD dataset folder (per-reviewer tokens)",
        description="With a reviewers file (DIR/reviewers.json) every review decision is taken by a signed-in "
        "reviewer: `unveil ui` asks for the token, `unveil review` reads UNVEIL_REVIEWER_TOKEN (or prompts), a "
        "Studio answer carries it as `token`. Without the file the local user is the one reviewer.",
    )
    verbs = p.add_subparsers(dest="verb", required=True, metavar="{add,list,remove,assign,policy}")
    add = verbs.add_parser("add", help="add a reviewer and print their token (shown only this once)")
    add.add_argument("dir", help="dataset folder written by `unveil generate`")
    add.add_argument("name", help="the reviewer's name, as decisions will record it")
    add.add_argument(
        "--adjudicator",
        action="store_true",
        help="may undo anyone's entry (logged as an override) and settle samples where reviewers disagree",
    )
    add.add_argument(
        "--new-token", action="store_true", help="give an existing reviewer a new token (the old one stops)"
    )
    lst = verbs.add_parser("list", help="print the reviewers and their roles")
    lst.add_argument("dir", help="dataset folder")
    rm = verbs.add_parser("remove", help="remove a reviewer (their token stops working; decisions stay)")
    rm.add_argument("dir", help="dataset folder")
    rm.add_argument("name", help="the reviewer to remove")
    asg = verbs.add_parser(
        "assign",
        help="split the samples among reviewers with overlap: each sample to N of them, by the id's hash",
    )
    asg.add_argument("dir", help="dataset folder")
    asg.add_argument("--reviewers", required=True, help="comma-separated names (in the reviewers file, if any)")
    asg.add_argument(
        "--per-sample",
        type=bounded_int(1, 100),
        default=None,
        help="reviewers per sample, the policy's overlap: stored in DIR/review_policy.json the first time; another "
        "value than the stored one is refused (default: the folder's, else 2)",
    )
    pol = verbs.add_parser(
        "policy",
        help="print the folder's review policy or, with flags, change it (used by `unveil ui`, `unveil review`, "
        "Studio)",
    )
    pol.add_argument("dir", help="dataset folder")
    pol.add_argument("--min-reviewers", type=bounded_int(1, 100), help="reviewers needed per sample")
    pol.add_argument("--review-rule", choices=RULES, help="how several reviewers combine")
    pol.add_argument("--overlap", type=bounded_int(1, 100), help="reviewers each sample is assigned to")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the verb."""
    from tools.reviewers import add_reviewer, load_reviewers, remove_reviewer, reviewers_path

    root = Path(args.dir)
    if not root.is_dir():
        raise MissingFileError(f"{str(root)!r}: no such folder")
    path = reviewers_path(root)
    if args.verb == "add":
        token = add_reviewer(
            path, args.name, "adjudicator" if args.adjudicator else "reviewer", new_token=args.new_token
        )
        print(token)
        print(
            f"reviewer {args.name.strip()!r} added to {path}; the token above is shown only now: give it to them "
            "(`unveil ui` signs in with it; `UNVEIL_REVIEWER_TOKEN=... unveil review DIR ...`)",
            file=sys.stderr,
        )
    elif args.verb == "assign":
        _assign(root, args)
    elif args.verb == "policy":
        _policy(root, args)
    elif args.verb == "remove":
        remove_reviewer(path, args.name)
        print(f"reviewer {args.name!r} removed from {path}", file=sys.stderr)
    else:
        people = load_reviewers(path)
        if people is None:
            print(f"{path}: no reviewers file (single-user mode: the local user is the one reviewer)", file=sys.stderr)
        for name, entry in sorted((people or {}).items()):
            print(f"{name}\t{entry.get('role', 'reviewer')}\t{entry.get('added', '')}")
    return 0


def _assign(root: Path, args: argparse.Namespace) -> None:
    """Write the assignment and print how many of the pending samples each reviewer got."""
    from runner.ctd_dataset import load_samples
    from tools.reviewers import save_assignment

    names = [n.strip() for n in args.reviewers.split(",") if n.strip()]
    policy, new = resolve_policy(root, overlap=args.per_sample)  # refused before anything is written
    assignment = save_assignment(root, names, policy.overlap or 2)
    record_policy(root, {**new, "overlap": assignment.per_sample})
    pending = [sid for sid, r in load_samples(root).items() if r.get("status") == "pending_review"]
    counts = dict.fromkeys(assignment.reviewers, 0)
    for sid in pending:
        for name in assignment.of(sid):
            counts[name] += 1
    print(
        f"each sample goes to {assignment.per_sample} of {len(names)} reviewers (by its id's hash; samples written "
        f"later too): of {len(pending)} pending, " + ", ".join(f"{n} {c}" for n, c in counts.items()),
        file=sys.stderr,
    )


def _policy(root: Path, args: argparse.Namespace) -> None:
    """Print the folder's review policy, after storing the values the flags give (the one way to change one)."""
    asked = {"min_reviewers": args.min_reviewers, "rule": args.review_rule, "overlap": args.overlap}
    given = {k: v for k, v in asked.items() if v is not None}
    policy = record_policy(root, given) if given else load_policy(root)
    print(policy.describe())
    where = "stored in" if policy_path(root).is_file() else "defaults: nothing stored yet in"
    print(f"review policy {where} {policy_path(root)}", file=sys.stderr)
