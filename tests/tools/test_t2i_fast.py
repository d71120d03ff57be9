"""The text-to-image fast path (`tools.t2i.fast`): preset choice, QKV fusion, compile notice and eager fallback.

CUDA compilation and fp8 cannot run here (no GPU); what runs on CPU is the choice of preset, that the fused
projections compute the same images, and that a compilation failure falls back to eager and renders again.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.tiny import build_tiny_sd
from tools.t2i import UnsupportedOptionError, get_generator
from tools.t2i.fast import PRESETS, CompileGuard, FastPath, apply_fast_path, is_compile_error, resolve_accel


@pytest.fixture(scope="module")
def sd_dir(tmp_path_factory) -> str:
    return build_tiny_sd(tmp_path_factory.mktemp("tiny-sd"))


def test_auto_is_compiled_on_cuda_and_eager_on_cpu():
    assert resolve_accel("auto", "cpu").name == "eager"
    assert resolve_accel("auto", "cuda").name == "compile"
    assert resolve_accel("auto", "cuda:1").compile
    assert resolve_accel("eager", "cuda") == PRESETS["eager"]
    assert resolve_accel("fp8", "cuda").fp8 and not resolve_accel("compile", "cuda").fp8


def test_fast_presets_and_unknown_names_are_refused_off_cuda():
    for name in ("compile", "fp8"):
        with pytest.raises(UnsupportedOptionError, match="needs a CUDA device"):
            resolve_accel(name, "cpu")
    with pytest.raises(UnsupportedOptionError, match="accel 'turbo'"):
        resolve_accel("turbo", "cuda")


def test_generator_option_is_checked_at_construction(sd_dir):
    with pytest.raises(UnsupportedOptionError, match="needs a CUDA device"):
        get_generator(f"diffusers:{sd_dir}", device="cpu", accel="fp8")
    from tools.t2i.diffusers_backend import DiffusersGenerator

    gen = get_generator(f"diffusers:{sd_dir}", device="cpu", accel="eager")
    assert isinstance(gen, DiffusersGenerator) and gen.fast_path.name == "eager"


def test_fused_qkv_projections_render_the_same_image(sd_dir):
    from diffusers import StableDiffusionPipeline

    def render(pipe) -> np.ndarray:
        out = pipe(
            "a red car",
            height=32,
            width=32,
            num_inference_steps=2,
            output_type="np",
            generator=torch.Generator().manual_seed(3),
        )
        return np.asarray(out.images[0])

    plain = StableDiffusionPipeline.from_pretrained(sd_dir, safety_checker=None, requires_safety_checker=False)
    plain.set_progress_bar_config(disable=True)
    reference = render(plain)
    # The fusion step of the compiled preset, without compilation (CPU).
    apply_fast_path(plain, FastPath("fuse-only", fuse_qkv=True))
    from diffusers.models.attention_processor import Attention

    attns = [m for m in plain.unet.modules() if isinstance(m, Attention)]
    assert attns and all(getattr(a, "fused_projections", False) for a in attns), "attention was not fused"
    fused = render(plain)
    assert np.abs(fused - reference).max() < 1e-4


class _Unet(torch.nn.Module):
    def forward(self, x):  # pragma: no cover - never called
        return x


def test_compile_failure_falls_back_to_eager_and_renders_again(capsys):
    unet = _Unet()
    unet._compiled_call_impl = lambda *a, **k: None  # what nn.Module.compile() leaves
    guard = CompileGuard(PRESETS["compile"])
    calls: list[int] = []

    def render():
        calls.append(len(calls))
        if len(calls) == 1:
            raise torch._dynamo.exc.TorchDynamoException("inductor exploded")
        return "image"

    with pytest.warns(RuntimeWarning, match="rendering with the eager UNet"):
        assert guard.run(unet, (4, 512, 512), render) == "image"
    assert calls == [0, 1] and guard.failed and unet._compiled_call_impl is None
    assert "compiling the UNet for batch shape (4, 512, 512)" in capsys.readouterr().err
    # Once fallen back, later batches run eagerly with no notice.
    assert guard.run(unet, (8, 512, 512), lambda: "again") == "again"
    assert capsys.readouterr().err == ""


def test_other_errors_are_not_taken_for_compile_failures(capsys):
    guard = CompileGuard(PRESETS["compile"])

    def boom():
        raise ValueError("bad prompt")

    with pytest.raises(ValueError, match="bad prompt"):
        guard.run(_Unet(), (2, 64, 64), boom)
    assert not guard.failed
    # The notice is printed once per new shape only.
    guard.run(_Unet(), (2, 64, 64), lambda: None)
    guard.run(_Unet(), (2, 64, 64), lambda: None)
    assert capsys.readouterr().err.count("compiling the UNet") == 2  # the failed first call, then the success
    try:
        raise RuntimeError("wrapped") from torch._dynamo.exc.TorchDynamoException("inner")
    except RuntimeError as exc:
        assert is_compile_error(exc)
    assert not is_compile_error(RuntimeError("plain"))


def test_eager_guard_never_prints(capsys):
    guard = CompileGuard(PRESETS["eager"])
    assert guard.run(_Unet(), (1, 32, 32), lambda: 7) == 7
    assert capsys.readouterr().err == ""


def test_a_spec_can_name_the_unet_path(tmp_path) -> None:
    """`diffusers:MODEL?accel=eager` picks the UNet path from any graph context or command; other keys are refused."""
    import pytest

    from tools.t2i.errors import UnsupportedOptionError
    from tools.t2i.registry import get_generator

    gen = get_generator(f"diffusers:{tmp_path}?accel=eager")
    assert gen.fast_path.name == "eager"  # type: ignore[attr-defined]
    with pytest.raises(UnsupportedOptionError, match="accel= only"):
        get_generator(f"diffusers:{tmp_path}?speed=fast")


def test_switches_change_a_compiled_preset_and_its_inductor_options():
    assert resolve_accel("compile+nchw+vae+overlap", "cuda").inductor_options()["layout_optimization"] is False
    tuned = resolve_accel("compile+freeze+cd", "cuda")
    assert tuned.name == "compile+freeze+cd" and tuned.compile and tuned.fuse_qkv
    assert tuned.freezing and tuned.coordinate_descent and not tuned.gemm_autotune
    assert tuned.inductor_options() == {"conv_1x1_as_mm": True, "freezing": True, "coordinate_descent_tuning": True}
    # A URL query hands `+` over as a space: the same preset.
    assert resolve_accel("compile freeze cd", "cuda") == tuned
    gemm = resolve_accel("compile+gemm", "cuda").inductor_options()
    assert gemm["max_autotune_gemm"] and gemm["max_autotune_conv_backends"] == "ATEN" and "max_autotune" not in gemm
    # `no-` turns a switch off.
    assert resolve_accel("fp8+cd", "cuda").coordinate_descent
    assert not resolve_accel("fp8+cd+no-cd", "cuda").coordinate_descent
    assert not PRESETS["eager"].inductor_options()
    with pytest.raises(UnsupportedOptionError, match="unknown switch 'turbo'"):
        resolve_accel("compile+turbo", "cuda")
    with pytest.raises(UnsupportedOptionError, match="compiled presets"):
        resolve_accel("eager+freeze", "cuda")
    with pytest.raises(UnsupportedOptionError, match="needs a CUDA device"):
        resolve_accel("compile+freeze", "cpu")


def test_deferred_decodes_are_awaited_in_order():
    """Overlapped decoding hands each caller a handle on its batch's images; the results come back in order,
    and a failed decode reaches every caller of the batch."""
    import asyncio
    import concurrent.futures

    from tools.t2i.diffusers_backend import _Deferred, finished_images

    batch: concurrent.futures.Future = concurrent.futures.Future()
    results = ["inline", _Deferred(batch, 1), _Deferred(batch, 0)]

    async def go():
        task = asyncio.ensure_future(finished_images(results))
        await asyncio.sleep(0)
        assert not task.done()  # still decoding
        batch.set_result(["a", "b"])
        return await task

    assert asyncio.run(go()) == ["inline", "b", "a"]
    failed: concurrent.futures.Future = concurrent.futures.Future()
    failed.set_exception(RuntimeError("decode failed"))
    with pytest.raises(RuntimeError, match="decode failed"):
        asyncio.run(finished_images([_Deferred(failed, 0)]))


def test_cpu_generators_decode_as_diffusers_does(sd_dir):
    gen = get_generator(f"diffusers:{sd_dir}", device="cpu")
    assert not gen.decodes_itself(gen.pipeline)  # type: ignore[attr-defined]


def test_own_decode_gives_the_pipelines_images_bit_for_bit(sd_dir):
    """`decode_to_pil` (the compiled presets' decode, uint8 conversion on the device) equals diffusers' own
    `output_type="pil"` post-processing, pixel for pixel."""
    from diffusers import StableDiffusionPipeline

    from tools.t2i.diffusers_backend import decode_to_pil

    pipe = StableDiffusionPipeline.from_pretrained(sd_dir, safety_checker=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)

    def run(output_type: str):
        gens = [torch.Generator().manual_seed(s) for s in (5, 6)]
        return pipe(
            ["a red car", "a blue boat"],
            height=32,
            width=32,
            num_inference_steps=2,
            generator=gens,
            output_type=output_type,
        ).images

    reference = run("pil")
    ours = decode_to_pil(pipe, run("latent"))
    assert [im.size for im in ours] == [im.size for im in reference]
    for mine, theirs in zip(ours, reference, strict=True):
        assert np.array_equal(np.asarray(mine), np.asarray(theirs))
    assert not np.array_equal(np.asarray(ours[0]), np.asarray(ours[1]))


def test_a_spec_can_name_switches(tmp_path) -> None:
    """`?accel=compile+freeze` survives URL query parsing (which turns `+` into a space)."""
    with pytest.raises(UnsupportedOptionError, match=r"accel='compile\+freeze' .*needs a CUDA device"):
        get_generator(f"diffusers:{tmp_path}?accel=compile+freeze", device="cpu")


# -- batch buckets and static compilation ----------------------------------------------------------------


def test_compiled_presets_pad_batches_up_to_the_next_bucket():
    compiled = resolve_accel("compile", "cuda")
    sizes = {compiled.padded_batch(n, 32) for n in range(1, 33)}
    assert sizes == {8, 32} == set(compiled.batch_sizes(32))  # the warm-up compiles exactly these
    assert [compiled.padded_batch(n, 32) for n in (1, 2, 8, 9, 17)] == [8, 8, 8, 32, 32]
    assert compiled.padded_batch(10, 12) == 12 and compiled.batch_sizes(12) == (8, 12)  # max_batch is a bucket
    assert compiled.padded_batch(40, 32) == 40  # never below the batch itself
    assert compiled.padded_batch(5, 32, (4, 6)) == 6 and compiled.batch_sizes(32, (4, 6)) == (4, 6, 32)
    assert resolve_accel("fp8", "cuda").padded_batch(3, 32) == 8
    assert PRESETS["eager"].padded_batch(3, 32) == 3  # the parity path renders exactly what was asked
    assert resolve_accel("compile+no-bucket", "cuda").padded_batch(3, 32) == 3
    # A dynamic batch dimension: no buckets; at least 2 rows (a batch of 1 would get a graph of its own), and the
    # warm-up's second size makes the dimension symbolic.
    dynamic = resolve_accel("compile+dynamic", "cuda")
    assert [dynamic.padded_batch(n, 32) for n in (1, 2, 3, 31)] == [2, 2, 3, 31]
    assert dynamic.batch_sizes(32) == (2, 32)


def test_compile_settings_are_read_and_checked(monkeypatch):
    from tools.env import SettingError
    from tools.t2i.warmup import CompileSettings, compile_settings

    for name in ("UNVEIL_T2I_BUCKETS", "UNVEIL_T2I_WARMUP_SIZES", "UNVEIL_T2I_WARMUP", "UNVEIL_COMPILE_SHARED"):
        monkeypatch.delenv(name, raising=False)
    assert compile_settings() == CompileSettings()
    assert CompileSettings().buckets == (8, 32) and CompileSettings().warmup_sizes == ((512, 512),)
    monkeypatch.setenv("UNVEIL_T2I_BUCKETS", "32, 8,8")
    monkeypatch.setenv("UNVEIL_T2I_WARMUP_SIZES", "512x768,256")
    monkeypatch.setenv("UNVEIL_T2I_WARMUP", "off")
    got = compile_settings()
    assert got.buckets == (8, 32) and got.warmup_sizes == ((512, 768), (256, 256)) and got.warmup is False
    for name, bad, says in (
        ("UNVEIL_T2I_BUCKETS", "0,8", "between 1 and"),
        ("UNVEIL_T2I_BUCKETS", "eight", "expected batch sizes"),
        ("UNVEIL_T2I_WARMUP_SIZES", "500x500", "multiples of 8"),
        ("UNVEIL_T2I_WARMUP_SIZES", "big", "WIDTHxHEIGHT"),
    ):
        monkeypatch.setenv(name, bad)
        with pytest.raises(SettingError, match=f"{name}=.*{says}"):
            compile_settings()
        monkeypatch.delenv(name)
    # Every setting is declared once, with its variable and help.
    from dataclasses import fields

    assert all(f.metadata["env"].startswith("UNVEIL_") and f.metadata["description"] for f in fields(CompileSettings))


def _recording_backend(kinds: list[str], used: list[int]):
    """A Dynamo backend that records whether each graph it gets has a symbolic (dynamic) shape."""

    def backend(gm, example_inputs):
        symbolic = any(
            isinstance(x, torch.SymInt)
            or (isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in x.shape))
            for x in example_inputs
        )
        kinds.append("symbolic" if symbolic else "static")
        index = len(kinds) - 1

        def run(*args):
            used.append(index)
            return gm(*args)

        return run

    return backend


def test_static_compilation_keeps_full_batches_on_their_own_graph():
    from tools.t2i.fast import compile_static

    torch._dynamo.reset()
    # Plain `module.compile()`: one odd batch and the symbolic graph serves every later call, full batches and a
    # second module of the same class included. This is what `compile_static` avoids (Inductor turns off its
    # convolution layout optimisation for symbolic shapes).
    kinds: list[str] = []
    used: list[int] = []
    first, second = torch.nn.Conv2d(4, 4, 3), torch.nn.Conv2d(4, 4, 3)
    for m in (first, second):
        m.compile(backend=_recording_backend(kinds, used))
    for m, rows in ((first, 4), (first, 3), (first, 4), (second, 4)):
        m(torch.randn(rows, 4, 8, 8))
    assert [kinds[i] for i in used] == ["static", "symbolic", "symbolic", "symbolic"]

    torch._dynamo.reset()
    kinds, used = [], []
    first, second = torch.nn.Conv2d(4, 4, 3), torch.nn.Conv2d(4, 4, 3)
    for m in (first, second):
        compile_static(m, backend=_recording_backend(kinds, used))
    for m, rows in ((first, 4), (first, 3), (first, 4), (second, 4)):
        m(torch.randn(rows, 4, 8, 8))
    assert set(kinds) == {"static"} and used[2] == used[0] != used[1]
    torch._dynamo.reset()


async def test_padded_rows_are_rendered_and_dropped(sd_dir, tmp_path):
    """A bucketed batch of 3 images is rendered as 8 rows (the smallest bucket); the 3 images are those of an
    unpadded render."""
    from dataclasses import replace

    from tools.image_store import get_image_store
    from tools.t2i import GenerationRequest
    from tools.t2i.batching import Job
    from tools.t2i.diffusers_backend import _ImageJob

    store = get_image_store(tmp_path / "store")
    gen = get_generator(f"diffusers:{sd_dir}", store=store, device="cpu", max_batch=8)
    reqs = [
        GenerationRequest(prompt=p, seed=40 + i, width=32, height=32, steps=2)
        for i, p in enumerate(["a red car", "a blue boat", "a green tree"])
    ]
    key = (id(gen.pipeline), tuple(sorted(gen.call_kwargs(reqs[0]).items())))
    jobs = [Job(key, _ImageJob(r.prompt, gen.validate(r), r.seed), gen.render_batch) for r in reqs]
    calls: list[int] = []
    real_pipe = gen.pipeline

    class Spy:
        def __getattr__(self, name):
            return getattr(real_pipe, name)

        def __call__(self, **kwargs):
            calls.append(len(kwargs["prompt"]))
            return real_pipe(**kwargs)

    # The bucketing of the compiled presets, on the eager UNet (no compilation on CPU).
    gen.fast_path = replace(PRESETS["eager"], bucket_batches=True)
    gen._pipe = Spy()
    try:
        images = gen.render_batch(jobs)
    finally:
        gen._pipe = None
        gen.fast_path = PRESETS["eager"]
    assert calls == [8] and len(images) == 3
    solo = get_generator(f"diffusers:{sd_dir}", store=store, device="cpu", max_batch=1)
    for r, image in zip(reqs, images, strict=True):
        alone = np.asarray(store.open((await solo.generate(r))[0])).astype(int)
        assert np.abs(np.asarray(image).astype(int) - alone).max() <= 1
