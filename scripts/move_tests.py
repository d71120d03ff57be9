"""Move the test files into folders that mirror the packages (issue 35, item 6), and fix what names them.

    python3 scripts/move_tests.py              # git mv every test file to its folder, then fix the references
    python3 scripts/move_tests.py --move-only  # only the git mv (the first of the two commits)
    python3 scripts/move_tests.py --check      # list what would move; exit 1 if anything would

Idempotent: a file already in its folder is left alone, so a merger re-runs it after merging branches that added
or changed test files in `tests/`. A file is placed by `FOLDERS` (what it mainly tests), else by the first rule of
`PREFIXES` its name matches; a `test_*.py` that matches neither stays in `tests/` and is listed, to be added to
`FOLDERS`. Helpers (`conftest.py`, `tiny.py`, `faultserver.py`, ...) stay in `tests/`.

The references fixed after a move, in every tracked text file: `tests.test_x` and `from tests import test_x`
(imports between test modules), `tests/test_x.py` (docs, docstrings, comments); and, in every test file of a
folder, the paths written for `tests/` itself (`Path(__file__).resolve().parent.parent` meant the repository and
is now the root two folders up; the fixtures folder is one folder up).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

FOLDERS: dict[str, tuple[str, ...]] = {
    "agents": (
        "test_categories.py",
        "test_provider_conformance.py",
        "test_faults.py",
        "test_gateway.py",
        "test_gateway_cache.py",
        "test_gateway_settings.py",
        "test_guards.py",
        "test_hf_vlm.py",
        "test_hostile_cache_lock.py",
        "test_hostile_confusables.py",
        "test_hostile_delimiters.py",
        "test_hostile_unicode_delimiters.py",
        "test_llamacpp.py",
        "test_llamacpp_server.py",
        "test_refiner.py",
        "test_secrets_urls.py",
        "test_server_schemas.py",
        "test_tag_schemas.py",
        "test_text_only_server.py",
        "test_transformers_lm.py",
    ),
    "graphs": (
        "test_ctd.py",
        "test_ctd_fidelity.py",
        "test_ctd_review_folder.py",
        "test_ctd_rules.py",
        "test_ctd_sampling.py",
        "test_graph_context.py",
        "test_guard_langgraph_dev.py",
        "test_hostile_image_roots.py",
        "test_hostile_injection.py",
        "test_ipr_graph.py",
        "test_langgraph_dev.py",
        "test_server_context.py",
        "test_tag_fidelity.py",
        "test_tag_figure6.py",
        "test_tag_graph.py",
        "test_tag_tree.py",
    ),
    "tools": (
        "test_hostile_formats.py",
        "test_hostile_url_gaps.py",
        "test_hostile_urls.py",
        "test_hub_offline.py",
        "test_image_decode_budget.py",
        "test_image_modes.py",
        "test_images.py",
        "test_kill_temp_files.py",
        "test_scorers.py",
        "test_t2i.py",
        "test_t2i_fast.py",
        "test_t2i_options.py",
        "test_t2i_warmup.py",
    ),
    "runner": (
        "test_batch.py",
        "test_batch_integrity.py",
        "test_ctd_benign_mtc.py",
        "test_ctd_export.py",
        "test_ctd_send_back.py",
        "test_hostile_export.py",
        "test_hostile_links.py",
        "test_hostile_reads.py",
        "test_ipr_one_loop.py",
        "test_kill_detect.py",
        "test_kill_generate.py",
        "test_kill_refine.py",
        "test_kill_support.py",
        "test_output_identity.py",
        "test_ray_engine.py",
        "test_ray_pool.py",
        "test_tag_readings.py",
    ),
    "evaluation": (
        "test_eval_benchmarks.py",
        "test_eval_cli.py",
        "test_eval_compare.py",
        "test_eval_datasets.py",
        "test_eval_detection.py",
        "test_eval_ipr.py",
        "test_eval_ipr_ablation.py",
        "test_eval_metrics.py",
        "test_eval_mtc_reference.py",
        "test_eval_report.py",
        "test_mhsc.py",
        "test_rewriter_formats.py",
        "test_run_files.py",
    ),
    "training": (
        "test_train_help.py",
        "test_training_data.py",
        "test_training_esd.py",
        "test_training_fast_sampling.py",
        "test_training_fidelity.py",
        "test_training_grpo.py",
        "test_training_render.py",
        "test_training_reward.py",
        "test_training_sft.py",
    ),
    "unveil": (
        "test_cli_rules.py",
        "test_detect_cli.py",
        "test_detection_input.py",
        "test_first_sight.py",
        "test_hostile_inputs.py",
        "test_hostile_trees.py",
        "test_newcomer_details.py",
        "test_paths.py",
        "test_render.py",
        "test_review_assign.py",
        "test_review_auth.py",
        "test_review_decisions.py",
        "test_review_labels.py",
        "test_secrets.py",
        "test_secrets_generate.py",
        "test_ui.py",
        "test_ui_agreement.py",
        "test_ui_curation.py",
        "test_ui_reliability.py",
        "test_ui_routes.py",
        "test_ui_studio_review.py",
        "test_workflow_cli.py",
        "test_workflow_ui.py",
    ),
    # Cross-cutting: the benches, the docs, and the project's own rules (layers, one error root, one home, setup).
    "bench": ("test_bench_smoke.py", "test_gpu_suite.py"),
    "docs": ("test_docs_fidelity.py", "test_documented_commands.py"),
    "project": (
        "test_any_budget.py",
        "test_data_files.py",
        "test_error_root.py",
        "test_extras.py",
        "test_extras_plugin.py",
        "test_layers.py",
        "test_one_home.py",
        "test_render_settings.py",
        "test_settings_env.py",
        "test_setup_script.py",
    ),
}

# For files added after this mapping was written: the first matching prefix decides.
PREFIXES: tuple[tuple[str, str], ...] = (
    ("test_eval_", "evaluation"),
    ("test_train", "training"),
    ("test_ui", "unveil"),
    ("test_review_", "unveil"),
    ("test_workflow_", "unveil"),
    ("test_ctd_studio", "graphs"),
    ("test_ctd", "graphs"),
    ("test_tag_", "graphs"),
    ("test_ipr_", "graphs"),
    ("test_gateway", "agents"),
    ("test_llamacpp", "agents"),
    ("test_t2i", "tools"),
    ("test_image", "tools"),
    ("test_scorer", "tools"),
    ("test_kill_", "runner"),
    ("test_batch", "runner"),
    ("test_ray_", "runner"),
    ("test_bench", "bench"),
    ("test_gpu_", "bench"),
    ("test_doc", "docs"),
)

DEPTH = 2  # tests/FOLDER/
TEXT_SUFFIXES = {".py", ".md", ".toml", ".cfg", ".ini", ".yaml", ".yml", ".json", ".txt", ".sh", ""}


def folder_of(name: str) -> str | None:
    """The folder a test file of this name belongs in, or None when neither table places it."""
    for folder, names in FOLDERS.items():
        if name in names:
            return folder
    return next((folder for prefix, folder in PREFIXES if name.startswith(prefix)), None)


def planned_moves() -> tuple[dict[str, str], list[str]]:
    """The files of `tests/` to move (name -> folder) and the `test_*.py` files no table places."""
    moves: dict[str, str] = {}
    unplaced: list[str] = []
    for path in sorted(TESTS.glob("test_*.py")):
        folder = folder_of(path.name)
        if folder is None:
            unplaced.append(path.name)
        elif (TESTS / folder / path.name).exists():
            sys.exit(f"move_tests: both tests/{path.name} and tests/{folder}/{path.name} exist; merge them by hand")
        else:
            moves[path.name] = folder
    return moves, unplaced


def git(*args: str) -> str:
    """Run git in the repository; its output."""
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def move(moves: dict[str, str]) -> None:
    """`git mv` each file to its folder."""
    for name, folder in moves.items():
        (TESTS / folder).mkdir(exist_ok=True)
        git("mv", f"tests/{name}", f"tests/{folder}/{name}")


def placed() -> dict[str, str]:
    """Every test module already in a folder of `tests/` (module name -> folder)."""
    return {p.stem: p.parent.name for p in TESTS.glob("*/test_*.py") if p.parent.name != "fixtures"}


def fix_references(modules: dict[str, str]) -> list[str]:
    """Point every tracked text file's imports of and paths to the moved test modules at their folders."""
    if not modules:
        return []
    names = "|".join(sorted(map(re.escape, modules), key=len, reverse=True))
    dotted = re.compile(rf"\btests\.({names})\b")
    from_tests = re.compile(rf"\bfrom tests import ({names})\b")
    slashed = re.compile(rf"\btests/({names})\.py\b")
    changed = []
    for rel in git("ls-files").splitlines():
        path = ROOT / rel
        if path.suffix not in TEXT_SUFFIXES or not path.is_file() or rel == "scripts/move_tests.py":
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = dotted.sub(lambda m: f"tests.{modules[m[1]]}.{m[1]}", text)
        new = from_tests.sub(lambda m: f"from tests.{modules[m[1]]} import {m[1]}", new)
        new = slashed.sub(lambda m: f"tests/{modules[m[1]]}/{m[1]}.py", new)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(rel)
    return changed


def fix_own_paths() -> None:
    """In each test file of a folder, paths written for a file of `tests/`: the repository is one folder up."""
    for path in TESTS.glob("*/test_*.py"):
        text = path.read_text(encoding="utf-8")
        root = f"Path(__file__).resolve().parents[{DEPTH}]"  # tests/FOLDER/test_x.py: the root is DEPTH folders up
        new = text.replace("Path(__file__).resolve().parent.parent", root)
        new = new.replace(f"Path(__file__).resolve().parents[{DEPTH - 1}]", root)
        new = new.replace('Path(__file__).parent / "fixtures"', 'Path(__file__).parent.parent / "fixtures"')
        if new != text:
            path.write_text(new, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Move, fix, and say what was done."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--move-only", action="store_true", help="only git mv (no reference is changed)")
    parser.add_argument("--check", action="store_true", help="list what would move; exit 1 if anything would")
    args = parser.parse_args(argv)
    moves, unplaced = planned_moves()
    for name in unplaced:
        print(f"move_tests: tests/{name} matches no folder: add it to FOLDERS", file=sys.stderr)
    if args.check:
        for name, folder in moves.items():
            print(f"tests/{name} -> tests/{folder}/")
        return 1 if moves else 0
    move(moves)
    print(f"move_tests: moved {len(moves)} file(s)")
    if not args.move_only:
        fix_own_paths()
        changed = fix_references(placed())
        print(f"move_tests: fixed references in {len(changed)} file(s)")
        # The renamed imports sort elsewhere; lines the longer paths pushed past 120 columns are listed by ruff.
        python = [p for p in changed if p.endswith(".py")]
        if not python:
            return 0
        subprocess.run([sys.executable, "-m", "ruff", "check", "--fix", "-q", "--select", "I", *python], cwd=ROOT)
        subprocess.run([sys.executable, "-m", "ruff", "check", "-q", "--select", "E501", *python], cwd=ROOT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
