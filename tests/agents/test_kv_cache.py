"""The embedded model's generation path (agents/providers/kv_cache.py, transformers_lm.py): the key/value cache that
grows in place gives the same logits bit for bit as transformers' own cache, and two generations run at once on a
single-threaded model with the same answers as one after the other."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agents.providers import transformers_lm as T  # noqa: E402
from agents.providers.kv_cache import growing_cache  # noqa: E402


@pytest.fixture(scope="module")
def tiny_lm() -> Any:
    """A random-weight Llama small enough to build in a moment (2 layers, grouped-query attention as SmolLM2)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    return LlamaForCausalLM(config).eval()


def _ids(n: int, seed: int) -> dict[str, Any]:
    ids = torch.randint(3, 96, (1, n), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


GREEDY = {"max_new_tokens": 40, "min_new_tokens": 40, "do_sample": False, "repetition_penalty": 1.15}


def _scores(model: Any, ids: dict[str, Any], **extra: Any) -> tuple[Any, Any]:
    with torch.inference_mode():
        out = model.generate(**ids, **GREEDY, **extra, return_dict_in_generate=True, output_logits=True, pad_token_id=0)
    return out.sequences, torch.stack(out.logits)


@pytest.mark.parametrize("prompt", [1, 7, 130])  # the buffers double during decoding from each prompt length
def test_the_growing_cache_gives_transformers_logits_bit_for_bit(tiny_lm: Any, prompt: int) -> None:
    ids = _ids(prompt, prompt)
    want_tokens, want_logits = _scores(tiny_lm, ids)
    got_tokens, got_logits = _scores(tiny_lm, ids, **{T.generate_cache_kwarg(): growing_cache(tiny_lm.config)})
    assert torch.equal(got_tokens, want_tokens)
    assert torch.equal(got_logits, want_logits)  # equal, not close: greedy answers cannot drift


def test_the_growing_cache_writes_new_rows_in_place_and_doubles_when_full(tiny_lm: Any) -> None:
    cache = growing_cache(tiny_lm.config)
    layer = cache.layers[0]
    with torch.inference_mode():
        tiny_lm(**_ids(10, 1), **{T.generate_cache_kwarg(): cache}, use_cache=True)
        assert layer.keys.shape[-2] == 10 and layer.keys.is_contiguous()  # the prompt's buffer is its own size
        tiny_lm(input_ids=torch.tensor([[5]]), **{T.generate_cache_kwarg(): cache}, use_cache=True)
        storage = layer.keys.untyped_storage().data_ptr()
        assert layer.keys.shape[-2] == 11 and layer._kbuf.shape[-2] == 20  # doubled once, with room to spare
        for _ in range(9):
            tiny_lm(input_ids=torch.tensor([[6]]), **{T.generate_cache_kwarg(): cache}, use_cache=True)
        assert layer.keys.shape[-2] == 20 and layer.keys.untyped_storage().data_ptr() == storage  # no copy since


def test_the_growing_cache_follows_transformers_when_it_replaces_the_rows(tiny_lm: Any) -> None:
    from transformers import DynamicCache

    kwarg = T.generate_cache_kwarg()
    caches = [growing_cache(tiny_lm.config), DynamicCache(config=tiny_lm.config)]
    logits = []
    with torch.inference_mode():
        for cache in caches:
            tiny_lm(**_ids(12, 2), **{kwarg: cache}, use_cache=True)
            cache.crop(-4)  # transformers replaces `keys` by a shorter view: the next update starts from that
            out = tiny_lm(input_ids=torch.tensor([[7, 8]]), **{kwarg: cache}, use_cache=True)
            logits.append(out.logits)
    assert torch.equal(logits[0], logits[1]) and caches[0].get_seq_length() == 10


def test_a_single_threaded_model_runs_two_generations_at_once_where_two_cpus_are_there() -> None:
    assert T.generation_slots(threads=1, cpus=2) == 2 and T.generation_slots(threads=1, cpus=16) == T.MAX_GENERATIONS
    assert T.generation_slots(threads=1, cpus=1) == 1  # one core: one at a time, as before
    assert T.generation_slots(threads=0, cpus=8) == 1  # torch's pool already takes every CPU
    assert T.generation_slots(threads=4, cpus=8) == 1
    from agents.providers.profiles import PROFILES

    assert PROFILES["transformers"].max_concurrency == T.MAX_GENERATIONS  # the gateway lets both in


class _Tokenizer:
    pad_token_id = 0
    eos_token_id = 2

    def apply_chat_template(self, turns: Any, **kwargs: Any) -> dict[str, Any]:
        return _ids(9, len(str(turns)))

    def decode(self, ids: Any, skip_special_tokens: bool) -> str:
        return " ".join(str(int(i)) for i in ids)


def _fake_lm(model: Any, slots: int) -> Any:
    return T.LoadedLM(
        model=model,
        tokenizer=_Tokenizer(),
        compiler=None,
        slots=threading.BoundedSemaphore(slots),
        cache_kwarg=T.generate_cache_kwarg(),
    )


def test_two_calls_generate_at_the_same_time_and_answer_as_they_would_alone(
    tiny_lm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_core.messages import HumanMessage

    both_inside = threading.Barrier(2, timeout=120)  # passes only if the second starts before the first ends
    real = tiny_lm.generate

    def generate(**kwargs: Any) -> Any:
        both_inside.wait()
        return real(**kwargs)

    lm = _fake_lm(
        SimpleNamespace(generate=generate, config=tiny_lm.config, generation_config=tiny_lm.generation_config), 2
    )
    monkeypatch.setattr(T, "load_lm", lambda model: lm)
    chat = T.TransformersChatModel(model_ref="tiny", max_tokens=12)
    prompts = [[HumanMessage(content="first")], [HumanMessage(content="second, longer")]]
    answers: dict[int, str] = {}

    def ask(i: int) -> None:
        answers[i] = str(chat._respond(prompts[i], {}).generations[0].message.content)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not both_inside.broken and len(answers) == 2

    alone = _fake_lm(tiny_lm, 1)
    monkeypatch.setattr(T, "load_lm", lambda model: alone)
    assert [str(chat._respond(p, {}).generations[0].message.content) for p in prompts] == [answers[0], answers[1]]


@pytest.mark.parametrize(("slots", "second_gets_in"), [(1, False), (2, True)])
def test_a_generation_holds_one_of_the_model_slots(
    tiny_lm: Any, monkeypatch: pytest.MonkeyPatch, slots: int, second_gets_in: bool
) -> None:
    from langchain_core.messages import HumanMessage

    seen: list[bool] = []
    lm = _fake_lm(None, slots)

    def generate(**kwargs: Any) -> Any:
        got = lm.slots.acquire(blocking=False)  # what a second caller would find now
        if got:
            lm.slots.release()
        seen.append(got)
        return torch.tensor([[0] * 9 + [1, 2, 3]])

    lm.model = SimpleNamespace(generate=generate, config=tiny_lm.config, generation_config=tiny_lm.generation_config)
    monkeypatch.setattr(T, "load_lm", lambda model: lm)
    T.TransformersChatModel(model_ref="tiny")._respond([HumanMessage(content="x")], {})
    assert seen == [second_gets_in]
    assert lm.slots.acquire(blocking=False) and lm.lock.acquire(blocking=False)  # both released after the call
