"""`unveil review`: apply human decisions to the samples a batch run (`unveil generate`) queued for review, list
the queue, and export the dataset. The web app (`unveil ui DIR`) takes the same decisions with the same semantics
(`runner.ctd_reviews.apply_reviews`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tools.env import env_str
from tools.errors import MissingFileError
from tools.safe_files import MAX_DATA_FILE_BYTES, read_regular
from unveil.commands.common import bounded_int
from unveil.ui.index import Problem


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `unveil review`."""
    r = sub.add_parser(
        "review",
        help="review queued CTD samples: list them, apply decisions, export",
        description="Without options, prints the queued samples. --decisions applies a JSONL of "
        "{id, decision: approve|reject, note} (the review queue with decisions filled in).",
    )
    r.add_argument("dir", help="dataset folder written by `unveil generate`")
    r.add_argument("--decisions", help="JSONL of reviewer decisions to apply")
    r.add_argument("--approve", action="append", default=[], metavar="ID", help="approve one sample (repeatable)")
    r.add_argument("--reject", action="append", default=[], metavar="ID", help="reject one sample (repeatable)")
    r.add_argument("--note", default="", help="note stored with --approve/--reject decisions")
    r.add_argument(
        "--send-back",
        action="store_true",
        help="with --reject and --note: send the samples back to the Eraser, which reads the note; the next "
        "`unveil generate` on the folder gives them another attempt",
    )
    r.add_argument(
        "--reviewer",
        help="single-user mode: name kept with each decision (default: the decisions' own, else the login name); "
        "with a reviewers file the name is the token's (UNVEIL_REVIEWER_TOKEN, else a prompt)",
    )
    r.add_argument(
        "--min-reviewers",
        type=bounded_int(1, 100),
        default=None,
        help="reviewers needed per sample: stored in DIR/review_policy.json the first time, for the web app and "
        "Studio too; another value than the stored one is refused (default: the folder's, else 1)",
    )
    r.add_argument(
        "--review-rule",
        choices=("unanimous", "majority"),
        default=None,
        help="how several reviewers combine, stored as --min-reviewers is (default: the folder's, else unanimous, "
        "the paper's: one rejection rejects)",
    )
    r.add_argument(
        "--export",
        action="store_true",
        help="write DIR/export/ afterwards (data.parquet, data.jsonl, data.csv, README.md card)",
    )
    r.add_argument(
        "--publish",
        metavar="REPO",
        help="write the export as --export does, then push it to the Hugging Face Hub dataset repository REPO "
        "(OWNER/NAME, its train split) with `datasets`' push_to_hub; the token is HF_TOKEN's, else the stored "
        "`huggingface-cli login`, and is never printed",
    )
    r.add_argument("--private", action="store_true", help="with --publish: create the Hub repository as private")
    r.set_defaults(func=run_review)


def _named_decisions(args: argparse.Namespace, root: Path) -> dict[str, Any] | None:
    """The decisions to apply: the --decisions file, then --approve and --reject (with --note). None when a
    named sample does not wait for review (said on stderr): a mistake worth an exit code, not a silent skip."""
    from runner.ctd_dataset import load_samples
    from runner.ctd_reviews import read_decisions

    decisions: dict[str, Any] = dict(read_decisions(args.decisions)) if args.decisions else {}
    named = [*args.approve, *args.reject]
    if named:
        records = load_samples(root)
        wrong = [sid for sid in named if (records.get(sid) or {}).get("status") != "pending_review"]
        if wrong:
            print(
                f"unveil review: not waiting for review here: {', '.join(wrong)} "
                f"(unknown id or already decided; `unveil review {root}` lists the queue)",
                file=sys.stderr,
            )
            return None
    decisions.update({sid: {"decision": "approve", "note": args.note} for sid in args.approve})
    back = {"send_back": True} if args.send_back else {}
    decisions.update({sid: {"decision": "reject", "note": args.note, **back} for sid in args.reject})
    return decisions


def review_actor(args: argparse.Namespace, root: Path, decisions: dict[str, Any]) -> tuple[str | None, str]:
    """Who applies the decisions (name, role). Without a reviewers file: single-user mode (`--reviewer`, else the
    decisions' own labels, else the login name; role `local`). With one: the reviewer whose token is in
    `UNVEIL_REVIEWER_TOKEN`, else typed at a prompt; a `--reviewer` or a decision line naming someone else is
    refused (nobody decides as another)."""
    import getpass

    from tools.reviewers import ReviewerAuthError, authenticate, load_reviewers, reviewers_path

    people = load_reviewers(reviewers_path(root))
    if people is None:
        return args.reviewer, "local"
    token = env_str("UNVEIL_REVIEWER_TOKEN", "") or ""
    if not token and sys.stdin.isatty():
        token = getpass.getpass(f"reviewer token for {root}: ")
    if not token:
        raise ReviewerAuthError(
            f"{root} has a reviewers file: set UNVEIL_REVIEWER_TOKEN to your token (from `unveil reviewers add`)"
        )
    who = authenticate(people, token)
    named = {args.reviewer} if args.reviewer else set()
    for answers in decisions.values():
        named |= {
            str(a.get("reviewer")) for a in (answers if isinstance(answers, list) else [answers]) if a.get("reviewer")
        }
    others = sorted(named - {who.name})
    if others:
        raise ReviewerAuthError(
            f"your token signs in as {who.name!r}; decisions naming {', '.join(map(repr, others))} must be applied "
            "with their own tokens"
        )
    return who.name, who.role


def _apply_decisions(args: argparse.Namespace, root: Path, decisions: dict[str, Any]) -> int:
    """Apply the decisions under the review policy as the authenticated reviewer, say what changed, and return the
    exit code: 1 when an undo was refused (another reviewer's entry: nothing of it was applied), else 0."""
    from runner.ctd_reviews import apply_reviews

    reviewer, role = review_actor(args, root, decisions)
    _say_not_assigned(root, reviewer, role, decisions)
    counts = apply_reviews(
        root, decisions, reviewer=reviewer, role=role, min_reviewers=args.min_reviewers, rule=args.review_rule
    )
    print(
        f"approved {counts['approved']}, rejected {counts['rejected']}"
        + (f", sent back {counts['sent_back']} to the Eraser" if counts["sent_back"] else "")
        + (f", undone {counts['undone']}" if counts["undone"] else "")
        + f", skipped {counts['skipped']}"
        + (f", {counts['pending']} waiting for more reviewers" if counts["pending"] else "")
        + (f", {counts['already']} already judged by you (not counted again)" if counts["already"] else "")
        + (
            f", {counts['refused']} undos refused (another reviewer's entry: only an adjudicator may undo it)"
            if counts["refused"]
            else ""
        )
        + (
            f", {counts['conflicts']} already decided by another reviewer (kept in review_history)"
            if counts["conflicts"]
            else ""
        ),
        file=sys.stderr,
    )
    return 1 if counts["refused"] else 0


def _say_not_assigned(root: Path, reviewer: str | None, role: str, decisions: dict[str, Any]) -> None:
    """Say on stderr which decided samples the folder's assignment gives to other reviewers: the assignment is
    advisory (the judgement counts all the same), so it is a note, not a refusal. Single-user mode and an
    adjudicator are never told."""
    from tools.reviewers import load_assignment

    assignment = load_assignment(root) if reviewer and role == "reviewer" else None
    if assignment is None:
        return

    def judges(answers: dict[str, Any] | list[dict[str, Any]]) -> bool:
        return any(
            a.get("decision") in ("approve", "reject") for a in (answers if isinstance(answers, list) else [answers])
        )

    judging = [sid for sid, answers in decisions.items() if judges(answers)]
    others = [sid for sid in judging if reviewer not in assignment.of(str(sid))]
    for sid in others[:20]:
        print(
            f"note: {sid} is not assigned to you (assigned to {', '.join(assignment.of(str(sid)))}); your judgement "
            "counts all the same (the assignment is advisory)",
            file=sys.stderr,
        )
    if len(others) > 20:
        print(f"note: and {len(others) - 20} more samples not assigned to you", file=sys.stderr)


def _own_queue(root: Path, items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """With a reviewers file and `UNVEIL_REVIEWER_TOKEN` set: the queue items that reviewer has not judged (of those
    assigned to them, with an assignment), and their name; else every item and ""."""
    from tools.reviewers import authenticate, load_assignment, load_reviewers, reviewers_path

    people, token = load_reviewers(reviewers_path(root)), env_str("UNVEIL_REVIEWER_TOKEN", "") or ""
    if people is None or not token:
        return items, ""
    me = authenticate(people, token).name
    assignment = load_assignment(root)
    mine = [
        it
        for it in items
        if me not in {r.get("reviewer") for r in it.get("reviews_so_far") or []}
        and (assignment is None or me not in assignment.reviewers or me in assignment.of(str(it["id"])))
    ]
    return mine, me


def _print_queue(root: Path) -> None:
    """Rewrite the views and print every sample waiting for review with its judges' votes (a signed-in reviewer's
    own queue: what they have not judged, of what is assigned to them)."""
    from runner.ctd_dataset import REVIEW_QUEUE, write_views

    write_views(root)
    text = read_regular(root / REVIEW_QUEUE, MAX_DATA_FILE_BYTES, what="review queue").decode("utf-8")
    lines = [ln for ln in text.split("\n") if ln.strip()]
    everyone = [json.loads(line) for line in lines]  # split on \n only: a U+2028 in a JSON string is text
    queue, me = _own_queue(root, everyone)
    for item in queue:
        print(
            f"[{item['id']}] {item.get('category')}/{item.get('subcategory')}\n  text:  {item.get('text')}"
            f"\n  image: {root / item['image'] if item.get('image') else '(none)'}"
            f"\n  erasure: {item.get('erasure_reason')}"
        )
        for v in item.get("votes") or []:
            verdict = "failed (not counted)" if v.get("failed") else "risk" if v.get("has_risk") else "no risk"
            why = v.get("error") if v.get("failed") else v.get("reason")
            print(f"    {v.get('judge') or '?':>9}: {verdict} {v.get('category') or ''} - {why or ''}")
    mine = f" by you ({me}; {len(everyone)} in all)" if me else ""
    print(f"{len(queue)} samples wait for review{mine}", file=sys.stderr)


def _print_dataset_notes(root: Path) -> None:
    """The lines the views leave out, each with its reason, and the moderation scores of the usable samples."""
    from runner.ctd_dataset import SAMPLES, moderation_summary

    for problem in bad_lines(root / SAMPLES):
        print(
            f"{SAMPLES} line {problem.line}{f' ({problem.id})' if problem.id else ''}: left out: {problem.reason}",
            file=sys.stderr,
        )
    stats = moderation_summary(root)
    if stats["n"]:
        print(
            f"moderation (usable samples scored: {stats['n']}): mean image score {stats['image_mean']:.4g}, "
            f"mean text score {stats['text_mean']:.4g}",
            file=sys.stderr,
        )


def run_review(args: argparse.Namespace) -> int:
    """Run `unveil review`: apply the decisions given, or list the queue when none is; then the dataset's notes
    and, with --export, the export."""
    from runner.ctd_dataset import SAMPLES
    from runner.ctd_export import export_hf, export_summary

    root = Path(args.dir)
    if not (root / SAMPLES).is_file():
        raise MissingFileError(f"{root}: no {SAMPLES} here (not a dataset folder written by `unveil generate`)")
    decisions = _named_decisions(args, root)
    if decisions is None:
        return 1
    rc = 0
    if decisions:
        rc = _apply_decisions(args, root, decisions)
    else:
        _print_queue(root)
    _print_dataset_notes(root)
    if args.export or args.publish:
        parquet = export_hf(root)
        print(f"export written to {export_summary(parquet.parent)}", file=sys.stderr)
        if args.publish:
            from runner.ctd_publish import publish_export

            print(f"published to {publish_export(parquet, args.publish, private=args.private)}", file=sys.stderr)
    return rc


def bad_lines(samples: Path) -> list[Problem]:
    """The lines of `samples.jsonl` that the views and the review leave out, each with its number and reason."""
    from runner.ctd_dataset import record_problem
    from unveil.ui.index import JsonlIndex

    def check(rec: dict[str, Any]) -> dict[str, Any]:
        problem = record_problem(rec)
        if problem:
            raise ValueError(problem)
        return {}

    index = JsonlIndex(samples, check)
    index.refresh()
    return index.all_problems()
