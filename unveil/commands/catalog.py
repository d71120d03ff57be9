"""`unveil list`: what a spec, a method or a flag may name, read from the tables the code itself uses.

Providers (`agents.providers.profiles`), text-to-image generators (`tools.t2i.registry`), guard models
(`agents.guard.GUARDS`), detection and IPR methods, scorers (`tools.scorers.score`), detection dataset formats
(`evaluation.datasets`) and the LangGraph graphs (`langgraph.json`), each with the spec that names it. Nothing is
copied here: a provider, guard or format added to its table shows up.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tools.datafiles import DATA_DIR
from unveil.commands.common import json_text

SECTIONS = ("providers", "generators", "guards", "methods", "scorers", "formats", "graphs")
LANGGRAPH_JSON = DATA_DIR.parent / "langgraph.json"  # the repository root: data/ is beside langgraph.json


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `list` subcommand."""
    p = sub.add_parser(
        "list",
        help="list providers, generators, guards, methods, scorers, dataset formats and graphs with their specs",
        description="Read from the tables the code uses, so the list is always the one a spec may name.",
    )
    p.add_argument("section", nargs="?", choices=SECTIONS, help="only this section (default: all)")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=run)


def providers() -> list[dict[str, str]]:
    """Every model provider a spec may name, with its spec form and what sets it apart."""
    from agents.providers.profiles import known_providers, provider_profile
    from agents.usage import price_table

    prices = price_table()
    out = []
    for name in known_providers():
        profile = provider_profile(name)
        notes = ["via LangChain" if profile.via_langchain else "Unveil's own"]
        if not profile.images:
            notes.append("text only (images go in as descriptions)")
        if profile.engine_hosted:
            notes.append("weights load in-process")
        if profile.free:
            notes.append("free")
        priced = sorted(k.split(":", 1)[1] for k in prices if k.startswith(f"{name}:"))
        if priced:
            notes.append("priced: " + ", ".join(priced))
        out.append({"name": name, "spec": f"{name}:MODEL[@BASE_URL]", "notes": "; ".join(notes)})
    return out


def generators() -> list[dict[str, str]]:
    """The text-to-image generator kinds (their registry records), with the defaults of CTD and IPR."""
    from tools.t2i.registry import DEFAULT_CTD_GENERATOR, DEFAULT_IPR_GENERATOR, GENERATOR_KINDS

    defaults = ((DEFAULT_CTD_GENERATOR, "CTD"), (DEFAULT_IPR_GENERATOR, "IPR"))
    rows = []
    for name, kind in GENERATOR_KINDS.items():
        uses = [f"{spec} ({use} default)" for spec, use in defaults if spec.split(":", 1)[0] == name]
        model = "MODEL_ID_OR_FOLDER" if kind.pipeline else "MODEL"
        rows.append({"name": name, "spec": f"{name}:{model}", "notes": "; ".join([kind.help, *uses])})
    return rows


def guards() -> list[dict[str, str]]:
    """The guard models of `unveil detect --method guard:NAME`, and a template of one's own."""
    from agents.guard import GUARDS

    rows = [{"name": name, "spec": f"guard:{name}", "notes": "model: --role-model guard=SPEC"} for name in GUARDS]
    rows.append({"name": "template", "spec": "guard:template=FILE", "notes": "a guard prompt file of your own"})
    return rows


def methods() -> list[dict[str, str]]:
    """The detection methods and the IPR evaluation's generation methods."""
    from unveil.commands.evaluate_ipr import IPR_METHODS

    rows = [
        {"name": "tag", "spec": "--method tag", "notes": "TAG detection (detect, evaluate detection)"},
        {"name": "vanilla", "spec": "--method vanilla", "notes": "the one-call baseline (detect, evaluate detection)"},
    ]
    rows += [{"name": g["spec"], "spec": f"--method {g['spec']}", "notes": "a guard model"} for g in guards()]
    rows += [{"name": m, "spec": f"--methods {m}", "notes": "evaluate ipr"} for m in IPR_METHODS]
    return rows


def scorers() -> list[dict[str, str]]:
    """The image scorers of `--scorers` (their registry entries), with the modules each needs."""
    from tools.scorers.registry import SCORERS

    return [
        {
            "name": name,
            "spec": name,
            "notes": entry.help + (f"; needs {', '.join(entry.modules)}" if entry.modules else ""),
        }
        for name, entry in SCORERS.items()
    ]


def formats() -> list[dict[str, str]]:
    """The detection dataset layouts of `--format` (and `--dataset FMT:FILE`)."""
    from evaluation.datasets import FORMATS

    rows = [{"name": f.name, "spec": f"--dataset {f.name}:FILE", "notes": f.help} for f in FORMATS.values()]
    rows.append({"name": "auto", "spec": "--format auto", "notes": "guessed from the file (the default)"})
    return rows


def graphs() -> list[dict[str, str]]:
    """The LangGraph graphs registered for Studio and `langgraph dev`."""
    if not LANGGRAPH_JSON.is_file():
        return []
    table = json.loads(LANGGRAPH_JSON.read_text(encoding="utf-8")).get("graphs") or {}
    return [{"name": name, "spec": str(target), "notes": "langgraph.json"} for name, target in table.items()]


def catalog(sections: tuple[str, ...] = SECTIONS) -> dict[str, list[dict[str, str]]]:
    """The named sections of the list."""
    makers: dict[str, Any] = {
        "providers": providers,
        "generators": generators,
        "guards": guards,
        "methods": methods,
        "scorers": scorers,
        "formats": formats,
        "graphs": graphs,
    }
    return {name: makers[name]() for name in sections}


def run(args: argparse.Namespace) -> int:
    """Print the list, as aligned text or JSON."""
    table = catalog((args.section,) if args.section else SECTIONS)
    if args.json:
        print(json_text(table))
        return 0
    for section, rows in table.items():
        print(f"{section}:")
        width = max((len(r["spec"]) for r in rows), default=0)
        for r in rows:
            print(f"  {r['spec']:<{width}}  {r['notes']}".rstrip())
        print()
    return 0
