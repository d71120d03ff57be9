"""The `hf:` provider on a tiny random-weight Qwen2.5-VL (and a PEFT LoRA adapter saved from it), loaded from
folders."""

from __future__ import annotations

import base64
import io

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from PIL import Image
from pydantic import BaseModel

from agents.gateway import Gateway, GatewaySettings
from agents.providers.hf_vlm import (
    HFChatModel,
    HFModelError,
    get_loaded_vlm,
    make_hf_chat_model,
    parse_hf_spec,
    to_hf_conversation,
)
from agents.spec import ModelSpec


@pytest.fixture(scope="module")
def qwen(tmp_path_factory) -> str:
    from tests.tiny_vlm import build_tiny_qwen_vl

    return build_tiny_qwen_vl(tmp_path_factory.mktemp("tiny-qwen"))


@pytest.fixture(scope="module")
def adapter(qwen, tmp_path_factory) -> str:
    """A LoRA adapter with non-zero weights (so it changes the model), saved with PEFT's save_pretrained."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    base = AutoModelForImageTextToText.from_pretrained(qwen)
    torch.manual_seed(1)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(base, cfg)
    folder = tmp_path_factory.mktemp("lora")
    peft_model.save_pretrained(folder)
    return str(folder)


def _data_url(color=(200, 30, 30), size=56) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), color).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _messages(url: str | None = None) -> list:
    content: list = [{"type": "text", "text": "Describe the image."}]
    if url:
        content.append({"type": "image_url", "image_url": {"url": url}})
    return [SystemMessage(content="You are a careful reviewer."), HumanMessage(content=content)]


def test_spec_syntax() -> None:
    opts = parse_hf_spec(
        "hf:Qwen/Qwen2.5-VL-3B-Instruct?adapter=runs/lora&merge=1&max_new_tokens=64&dtype=bfloat16&device=cpu"
    )
    assert opts.model == "Qwen/Qwen2.5-VL-3B-Instruct" and opts.adapter == "runs/lora" and opts.merge
    assert opts.max_new_tokens == 64 and opts.dtype == "bfloat16" and opts.device == "cpu"
    assert parse_hf_spec("hf:/models/qwen").adapter is None
    with pytest.raises(HFModelError, match="unknown option"):
        parse_hf_spec("hf:/models/qwen?adaptor=x")
    with pytest.raises(HFModelError, match="bad option value"):
        parse_hf_spec("hf:/models/qwen?max_new_tokens=many")
    with pytest.raises(HFModelError, match="dtype"):
        parse_hf_spec("hf:/models/qwen?dtype=int3")


def test_conversation_keeps_image_order_and_adds_tool_schema() -> None:
    convo, images = to_hf_conversation(_messages(_data_url()))
    assert convo[0] == {"role": "system", "content": "You are a careful reviewer."}
    assert convo[1]["content"] == [{"type": "text", "text": "Describe the image."}, {"type": "image"}]
    assert len(images) == 1 and images[0].size == (56, 56)
    tool = {
        "type": "function",
        "function": {"name": "V", "parameters": {"type": "object", "properties": {"ok": {"type": "boolean"}}}},
    }
    convo, _ = to_hf_conversation(_messages(), [tool])
    assert '"ok"' in convo[0]["content"] and "JSON" in convo[0]["content"]
    with pytest.raises(HFModelError, match="data: URLs"):
        to_hf_conversation(_messages("https://example.com/cat.png"))
    with pytest.raises(HFModelError, match="unreadable image"):
        to_hf_conversation(_messages("data:image/png;base64," + base64.b64encode(b"not an image").decode()))


async def test_tiny_qwen_answers_a_message_with_an_image_through_the_gateway(qwen) -> None:
    gateway = Gateway(GatewaySettings(cache_path=None))
    spec = f"hf:{qwen}?max_new_tokens=6"
    result = await gateway.text(role="refiner", spec=spec, messages=_messages(_data_url()))
    assert isinstance(result.value, str)
    usage = gateway.usage["by_role"]["refiner"]
    # The image became vision tokens: the request is longer than the same text without an image.
    with_image = usage["input_tokens"]
    await gateway.text(role="refiner", spec=spec, messages=_messages())
    without_image = gateway.usage["by_role"]["refiner"]["input_tokens"] - with_image
    assert with_image > without_image > 0
    assert 1 <= usage["output_tokens"] <= 6
    assert gateway.vision(spec)
    # Loaded once per process: a second model for the same weights shares them.
    model_a = gateway.model_for(ModelSpec.parse(spec), "a")
    model_b = make_hf_chat_model(ModelSpec.parse(f"hf:{qwen}?max_new_tokens=3"), gateway.shared)
    assert isinstance(model_a, HFChatModel) and model_a.vlm is model_b.vlm
    assert len(gateway.shared["hf_models"]) == 1


async def test_structured_call_fails_cleanly_on_random_weights(qwen) -> None:
    class Verdict(BaseModel):
        ok: bool

    gateway = Gateway(GatewaySettings(cache_path=None, max_repairs=0))
    from agents.gateway import ModelCallError, StructuredOutputError

    with pytest.raises((StructuredOutputError, ModelCallError)):
        await gateway.structured(role="x", spec=f"hf:{qwen}?max_new_tokens=4", schema=Verdict, messages=_messages())


def test_peft_adapter_loads_and_changes_the_model(qwen, adapter) -> None:
    import torch
    from peft import PeftModel

    shared: dict = {}
    base = get_loaded_vlm(parse_hf_spec(f"hf:{qwen}"), shared)
    tuned = get_loaded_vlm(parse_hf_spec(f"hf:{qwen}?adapter={adapter}"), shared)
    assert isinstance(tuned.model, PeftModel) and not isinstance(base.model, PeftModel)
    # A bare adapter folder works as the model too (its base model comes from adapter_config.json).
    bare = get_loaded_vlm(parse_hf_spec(f"hf:{adapter}"), shared)
    assert isinstance(bare.model, PeftModel)
    merged = get_loaded_vlm(parse_hf_spec(f"hf:{qwen}?adapter={adapter}&merge=1"), shared)
    assert not isinstance(merged.model, PeftModel)
    inputs = base.processor(text=["keep the prompt"], return_tensors="pt")
    with torch.inference_mode():
        logits = [m.model(**inputs).logits for m in (base, tuned, merged)]
    assert not torch.allclose(logits[0], logits[1])
    assert torch.allclose(logits[1], logits[2], atol=1e-4)
    # And the adapter model answers a message with an image.
    chat = make_hf_chat_model(ModelSpec.parse(f"hf:{qwen}?adapter={adapter}&max_new_tokens=4"), shared)
    msg = chat.invoke(_messages(_data_url()))
    assert isinstance(msg.content, str) and msg.usage_metadata["input_tokens"] > 0


def test_missing_model_or_adapter_gives_clear_errors(qwen, tmp_path) -> None:
    with pytest.raises(HFModelError, match="does not exist"):
        make_hf_chat_model(ModelSpec.parse(f"hf:{tmp_path / 'nope'}"), {})
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(HFModelError, match="cannot load"):
        make_hf_chat_model(ModelSpec.parse(f"hf:{empty}"), {})
    with pytest.raises(HFModelError, match="adapter_config.json"):
        make_hf_chat_model(ModelSpec.parse(f"hf:{qwen}?adapter={tmp_path / 'no-adapter'}"), {})
