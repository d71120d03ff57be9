"""Publishing a CTD export to the Hugging Face Hub (`unveil review DIR --publish REPO`): the export's Parquet rows,
images embedded, pushed with `datasets`' own `Dataset.push_to_hub`, so the Hub repository loads with
`datasets.load_dataset(REPO)` like any other.

The token is `huggingface_hub`'s usual one: `HF_TOKEN`, else the one `huggingface-cli login` stored. It is never
printed: an error from the Hub (whose message may quote a request) is reported with the token's text replaced.
"""

from __future__ import annotations

import os
from pathlib import Path

from tools.env import env_str
from tools.errors import UnveilError
from tools.extras import require_extra

TOKEN_ENV = "HF_TOKEN"


class PublishError(UnveilError, RuntimeError):
    """The export could not be pushed to the Hub repository (named in the message, the token never)."""


def _hidden(text: str, token: str | None) -> str:
    """`text` with the token's text replaced, so no message of a failed push shows it."""
    return text.replace(token, "***") if token else text


def publish_export(parquet: str | os.PathLike[str], repo: str, *, private: bool = False) -> str:
    """Push the export at `parquet` (written by `runner.ctd_export.export_hf`) to the Hub dataset repository
    `repo` (`owner/name`) as its `train` split, with `datasets`' `push_to_hub` and the token of `HF_TOKEN` (else
    the stored login); returns the repository's address. A failure is a `PublishError` naming the repository."""
    require_extra("ctd", "dataset publishing", ("datasets",))
    from datasets import Dataset

    from runner.ctd_export import export_features

    name = repo.strip()
    if name.count("/") != 1 or not all(name.split("/")):
        raise PublishError(f"--publish {repo!r}: expected a Hub dataset repository as OWNER/NAME")
    token = env_str(TOKEN_ENV)
    path = Path(parquet)
    ds = Dataset.from_parquet(str(path), features=export_features(), keep_in_memory=True, split="train")
    try:
        ds.push_to_hub(
            name,
            split="train",
            private=True if private else None,  # None: a new repository gets the account's default visibility
            token=token,
            commit_message="unveil review --publish",
        )
    except Exception as exc:  # noqa: BLE001 - any failure of the Hub client, reported without the token
        raise PublishError(_hidden(f"--publish {name}: the push failed: {type(exc).__name__}: {exc}", token)) from None
    return f"https://huggingface.co/datasets/{name}"
