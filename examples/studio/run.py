"""Run one Studio example against a local `langgraph dev` server, as Studio would (through `langgraph_sdk`).

    python examples/studio/run.py tag                    # the scripted TAG demo
    python examples/studio/run.py ipr                    # IPR on the tiny local generator
    python examples/studio/run.py ctd                    # CTD: pauses for review, then resumes with an approval
    python examples/studio/run.py ctd --url http://127.0.0.1:2025 --generator diffusers:/path/to/sd

Each example is a JSON file beside this script: `graph`, `input`, `context` (the assistant configuration Studio's
form edits) and, for `ctd`, the `resume` answer to the review pause. In Studio, paste `input` into the graph's
input and `context` into its configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


async def run(example: dict[str, Any], url: str) -> dict[str, Any]:
    """One run on a fresh thread; a run paused for review is resumed with the example's `resume` answer."""
    from langgraph_sdk import get_client

    client = get_client(url=url)
    thread = await client.threads.create()
    kw = {"context": example["context"], "raise_error": False}
    out: dict[str, Any] = await client.runs.wait(thread["thread_id"], example["graph"], input=example["input"], **kw)
    state = await client.threads.get_state(thread["thread_id"])
    if state.get("next") and "resume" in example:
        print(f"paused in {state['next']}: {json.dumps(state['interrupts'][0]['value'])[:300]}...", file=sys.stderr)
        out = await client.runs.wait(thread["thread_id"], example["graph"], command={"resume": example["resume"]}, **kw)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the named example and print its output as JSON; exit 1 when the run failed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("example", choices=sorted(p.stem for p in HERE.glob("*.json") if "-" not in p.stem))
    parser.add_argument("--url", default="http://127.0.0.1:2025", help="the langgraph dev server")
    parser.add_argument("--generator", help="another text-to-image spec than the example's (ipr, ctd)")
    args = parser.parse_args(argv)
    example = json.loads((HERE / f"{args.example}.json").read_text(encoding="utf-8"))
    if args.generator:
        example["context"]["generator"] = args.generator
    out = asyncio.run(run(example, args.url))
    print(json.dumps(out, indent=1, ensure_ascii=False))
    return 1 if isinstance(out, dict) and out.get("__error__") else 0


if __name__ == "__main__":
    raise SystemExit(main())
