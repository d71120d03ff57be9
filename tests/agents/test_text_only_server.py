"""A text-only model behind an OpenAI-compatible server: its refusal of image blocks is recognised by its words,
never retried, and reported once, naming the documented setting (`UNVEIL_TEXT_ONLY`) that makes Unveil send the
image's description instead. Checked against a loopback fake server that refuses images as real servers word it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from PIL import Image
from pydantic import BaseModel

from agents.content import ImagePart, build_messages
from agents.gateway import Gateway, GatewaySettings, ImagesUnsupportedError, ModelCallError
from tests.conftest import ROOT
from tests.faultserver import FaultServer
from tools.image_store import ImageStore

# How real servers refuse images sent to a text-only model.
REFUSALS = {
    "llama.cpp": "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj",
    "vllm": "Qwen/Qwen2.5-0.5B-Instruct is not a multimodal model",
    "vllm-limit": "At most 0 image(s) may be provided in one request.",
    "openai": "Invalid content type. image_url is only supported by certain models.",
    "lmstudio": "Model does not support images. Please use a model that does.",
    # llama-cpp-python's server without a vision chat handler: its chat template cannot add a list of blocks.
    "llama-cpp-python": 'can only concatenate str (not "list") to str',
}


class VanillaVerdict(BaseModel):
    toxic: bool
    reason: str = ""


def _messages(tmp_path: Path, vision: bool) -> list:
    store = ImageStore(tmp_path / "store")
    image_id = store.put_pil(Image.new("RGB", (8, 8), (255, 255, 255))).id
    return build_messages(
        "You judge pairs.",
        {"text": "a pair"},
        task="Return toxic.",
        store=store,
        vision=vision,
        images=[ImagePart("image", image_id, "a white square")],
    )


@pytest.mark.parametrize("server_kind", sorted(REFUSALS))
async def test_an_image_refusal_is_one_clear_error_without_retries(tmp_path: Path, server_kind: str) -> None:
    answers = {"VanillaVerdict": {"toxic": False, "reason": "fine"}}
    with FaultServer(answers, images_refused=REFUSALS[server_kind]) as server:
        gw = Gateway(GatewaySettings(cache_path=None, max_retries=4, backoff_base=0.001))
        with pytest.raises(ImagesUnsupportedError) as err:
            await gw.structured(
                role="vanilla_detector",
                spec=server.spec(),
                schema=VanillaVerdict,
                messages=_messages(tmp_path, vision=True),
            )
        assert len(server.bodies) == 1  # not retried, and no structured-method fallback either
        message = str(err.value)
        assert f"UNVEIL_TEXT_ONLY={server.spec()}" in message and "vanilla_detector" in message
        assert REFUSALS[server_kind][:30] in message
        # the same server answers a request without images (a text-only model declared as such)
        res = await gw.structured(
            role="vanilla_detector",
            spec=server.spec(),
            schema=VanillaVerdict,
            messages=_messages(tmp_path, vision=False),
        )
        assert res.value.reason == "fine"


async def test_a_transient_500_with_image_words_but_no_images_is_still_retried(tmp_path: Path) -> None:
    # The words alone do not make a refusal: a request without image blocks is retried as any 500 is.
    with FaultServer({"VanillaVerdict": {"toxic": False}}, fault_first=1, kinds=("500",)) as server:
        gw = Gateway(GatewaySettings(cache_path=None, backoff_base=0.001))
        res = await gw.structured(
            role="vanilla_detector",
            spec=server.spec(),
            schema=VanillaVerdict,
            messages=_messages(tmp_path, vision=False),
        )
        assert res.value.toxic is False and len(server.bodies) == 2
    with pytest.raises(ModelCallError):  # and a refusal with images stays a ModelCallError for batch records
        raise ImagesUnsupportedError("r", "openai:m", RuntimeError("image input is not supported"))


def test_detect_falls_back_to_the_description_and_names_the_setting(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    from unveil.cli import main

    image = tmp_path / "photo.png"
    Image.new("RGB", (16, 16), (250, 250, 245)).save(image)
    answers = {"VanillaVerdict": {"toxic": False, "reason": "a bottle of water"}}
    with FaultServer(answers, images_refused=REFUSALS["llama.cpp"]) as server:
        argv = [
            "detect",
            "--method",
            "vanilla",
            "--image",
            str(image),
            "--image-description",
            "a bottle of water",
            "--text",
            "Stay hydrated.",
            "--model",
            server.spec(),
            "--json",
        ]
        rc = main(argv)
        captured = capsys.readouterr()
        # The refusal is recognised at once (no retries) and the same call goes again with the description.
        assert rc == 0 and len(server.bodies) == 2, captured.err
        assert "does not take images" in caplog.text and f"UNVEIL_TEXT_ONLY={server.spec()}" in caplog.text
        assert json.loads(captured.out)["toxic"] is False
        last = json.dumps(server.bodies[-1]["messages"])
        assert "image_url" not in last and "a bottle of water" in last  # the description went instead
        # Declared text-only, the image is never offered: one request.
        monkeypatch.setenv("UNVEIL_TEXT_ONLY", server.spec())
        assert main([*argv[:-1], "--text", "Drink water.", "--json"]) == 0
        assert len(server.bodies) == 3 and "image_url" not in json.dumps(server.bodies[-1]["messages"])


def test_without_a_description_the_refusal_stands_and_names_the_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from unveil.cli import main

    image = tmp_path / "photo.png"
    Image.new("RGB", (16, 16), (250, 250, 245)).save(image)
    with FaultServer({"VanillaVerdict": {"toxic": False}}, images_refused=REFUSALS["llama-cpp-python"]) as server:
        argv = ["detect", "--method", "vanilla", "--image", str(image), "--text", "Hi.", "--model", server.spec()]
        rc = main([*argv, "--json"])
        err = capsys.readouterr().err
        assert rc != 0 and len(server.bodies) == 1, err  # one request, no retries
        assert "does not take images" in err and "UNVEIL_TEXT_ONLY" in err


async def test_the_fallback_is_remembered_for_the_run(tmp_path: Path) -> None:
    # Once a server refused images, later calls of the run send the description straight away.
    from agents.tag.vanilla import detect_vanilla

    store = ImageStore(tmp_path / "store")
    image_id = store.put_pil(Image.new("RGB", (8, 8), (255, 255, 255))).id
    answers = {"VanillaVerdict": {"toxic": False, "reason": "fine"}}
    with FaultServer(answers, images_refused=REFUSALS["llama-cpp-python"]) as server:
        gw = Gateway(GatewaySettings(cache_path=None, max_retries=4, backoff_base=0.001))
        for text in ("one", "two", "three"):
            part = ImagePart("image", image_id, "a white square")
            res = await detect_vanilla(gw, server.spec(), text=text, image=part, store=store)
            assert res.value.reason == "fine"
        assert len(server.bodies) == 4 and server.stats["images_refused"] == 1
        assert not gw.vision(server.spec()) and gw.vision(server.spec("another-model"))


def test_the_readme_documents_the_setting_in_the_gateway_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"^\| `UNVEIL_TEXT_ONLY` \|", readme, re.M)
