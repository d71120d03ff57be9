"""What runs inside Ray actors: the render, VLM and scorer pool members (each with a scratch store)."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import stat
import tempfile
from typing import Any

import ray

from tools.image_store import ImageStore, pid_alive
from tools.safe_files import UnsafePathError
from tools.scorers.score import ScoringSettings, score_here
from tools.t2i.base import GenerationRequest
from tools.t2i.compile_settings import default_cache_dir
from tools.t2i.options import GeneratorOptions
from tools.t2i.registry import build_local_generator

log = logging.getLogger(__name__)


def scratch_base() -> str:
    """The folder of this user's render members' scratch stores: `unveil-ray-UID` in the temp folder (mode 700),
    one per user, since a folder another user made first (one `/tmp/unveil-ray` for everyone) could not be
    written. What stands at that name is used only if it is a folder of this user that no one else may write to;
    anything else (another user's folder or file made first to block it, a link, this user's own folder left
    writable by others) is never written through: the members use a private folder in this user's cache instead,
    with a warning. Only if that one is not private either is it an `UnsafePathError`."""
    uid = os.getuid()
    shared = os.path.join(tempfile.gettempdir(), f"unveil-ray-{uid}")
    problem = _private_folder(shared, uid)
    if problem is None:
        return shared
    host = "".join(c if c.isalnum() else "-" for c in socket.gethostname())[:40]
    own = os.path.join(os.path.expanduser("~"), ".cache", "unveil", f"ray-scratch-{host}")  # a shared home: per host
    fallback_problem = _private_folder(own, uid)
    if fallback_problem is not None:
        raise UnsafePathError(
            f"{shared}: the render members' scratch folder {problem}, and {own} {fallback_problem}; remove them"
        )
    log.warning("%s: the render members' scratch folder %s; using %s instead", shared, problem, own)
    return own


def _private_folder(path: str, uid: int) -> str | None:
    """Make `path` (mode 700) if missing; why it cannot be this user's private folder, or None if it is."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        pass  # something else stands there, or the parent is not writable: said below
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"cannot be made ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return "is a link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != uid:
        return f"belongs to another user (uid {info.st_uid})"
    if info.st_mode & 0o022:
        return f"is writable by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


class _Scratch:
    """A per-member scratch image store: images live there only until their bytes went back to the driver."""

    def __init__(self, kind: str):
        base = scratch_base()
        for name in os.listdir(base):  # scratch of members killed before they could clean up
            pid = name.rsplit("-", 1)[-1]
            if pid.isdigit() and not pid_alive(int(pid)):
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        self.root = os.path.join(base, f"{kind}-{os.getpid()}")
        shutil.rmtree(self.root, ignore_errors=True)
        self.store = ImageStore(self.root)
        self.users: dict[str, int] = {}

    def hold(self, ids: list[str]) -> None:
        for i in ids:
            self.users[i] = self.users.get(i, 0) + 1

    def release(self, ids: list[str]) -> None:
        # Two concurrent requests may make the same image (same prompt and seed): it is removed after the last.
        for i in ids:
            self.users[i] -= 1
            if not self.users[i]:
                del self.users[i]
                self.store.path_for(i).unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class _Member:
    """What every pool member shares: where it runs, and its scratch store (if any) removed when it goes."""

    def ready(self) -> dict[str, Any]:
        """Where this member runs."""
        return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def __del__(self) -> None:
        scratch = getattr(self, "scratch", None)  # Ray's actor-class wrapper is an instance without one
        if scratch is not None:
            scratch.close()


def member_threads(cores: int, node_gpus: float, reserved_cpus: float, member_gpus: float) -> int | None:
    """The CPU threads a render member on a GPU sets: its share of the node's cores (one GPU's worth), never fewer
    than the CPUs it reserved. Ray sets `OMP_NUM_THREADS` to the reservation (1 by default), which left a GPU
    member's CPU work (Dynamo's tracing, the cache pickler's hashing, the text encoder's tokenizer) on one thread
    where a plain process uses every core. None (Ray's setting stands) for a member without a GPU: on a CPU the
    thread count changes the pixels and the compiled graphs' key, and the reservation is the user's choice there
    (`UNVEIL_RAY_RENDER_CPUS`)."""
    if member_gpus <= 0:
        return None
    share = cores // max(1, round(node_gpus))
    return max(1, int(reserved_cpus), share)


def prepare_render_process() -> dict[str, Any]:
    """What a render member sets before it loads a model: the machine's compile cache folder (the one a plain
    process on this machine uses, `default_cache_dir`, not torch's own default that Ray workers inherit or that
    importing torch._dynamo writes) and its share of the node's cores; both, for its report."""
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    node = ray.get_runtime_context().get_node_id()
    # ray.nodes and get_assigned_resources are unannotated: a list of node dicts, a dict of amounts.
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call, unused-ignore]
    node_gpus = next((float(n["Resources"].get("GPU", 0.0)) for n in nodes if n.get("NodeID") == node), 0.0)
    assigned: dict[str, float] = ray.get_runtime_context().get_assigned_resources()  # type: ignore[no-untyped-call, unused-ignore]
    threads = member_threads(cores, node_gpus, assigned.get("CPU", 0.0), assigned.get("GPU", 0.0))
    if threads is not None:
        torch.set_num_threads(threads)
    return {"cache_dir": default_cache_dir(), "threads": torch.get_num_threads()}


class RenderWorker(_Member):
    """One render pool member: the ordinary batched generator of `spec`, rendering into a scratch store."""

    def __init__(self, spec: str, long_prompts: str, options: GeneratorOptions):
        # Before the model loads: a compiled UNet's graphs are then found where this machine's processes keep them.
        self.process = prepare_render_process()
        self.scratch = _Scratch("render")
        self.generator = build_local_generator(spec, store=self.scratch.store, long_prompts=long_prompts, **options)

    def ready(self) -> dict[str, Any]:
        """Where this member runs, and its compile warm-up: loads the pipeline and compiles every shape it can
        render first (`DiffusersGenerator.warm_up`), so a bad model fails here, once, and a member that answers
        will not compile again (the pool sends requests only to members that answered)."""
        warm_up = getattr(self.generator, "warm_up", None)
        report = warm_up() if callable(warm_up) else {}  # the diffusers generator loads and compiles here
        return {**super().ready(), "warmup": report, "process": self.process}

    def stats(self) -> dict[str, Any]:
        """What this member compiled: its warm-up, the shapes it ran, any compilation after the warm-up."""
        compile_stats = getattr(self.generator, "compile_stats", None)
        return {**super().ready(), **(compile_stats() if callable(compile_stats) else {})}

    async def render(self, request: GenerationRequest) -> list[bytes]:
        """Render one request (batched with the others this member holds) and return its PNG bytes."""
        ids = await self.generator.generate(request)
        self.scratch.hold(ids)
        try:
            return [self.scratch.store.read_bytes(i) for i in ids]
        finally:
            self.scratch.release(ids)


class VLMWorker(_Member):
    """One member of an in-process chat model's pool (`hf:` specs): the model loaded once, answering requests."""

    def __init__(self, spec: str):
        from agents.providers.registry import build_local_chat_model
        from agents.spec import ModelSpec

        self.model = build_local_chat_model(ModelSpec.parse(spec), "", {})

    async def generate(self, messages: list[Any], options: dict[str, Any]) -> Any:
        """The model's `ChatResult` for `messages` (images travel inside them as data URLs)."""
        return await self.model._agenerate(messages, **options)


class ScorerWorker(_Member):
    """One scorer pool member: the one scoring entry point (`score_here`) on images sent as PNG bytes."""

    def __init__(self) -> None:
        self.scratch = _Scratch("scorer")

    async def score(
        self, images: list[bytes], prompt: str, names: list[str], settings: ScoringSettings
    ) -> list[dict[str, Any]]:
        """Rows of `score_images` for the images (stored here under the ids they have on the driver)."""
        stored = [
            await asyncio.to_thread(self.scratch.store.put_png, png, name=f"image {k}") for k, png in enumerate(images)
        ]
        ids = [s.id for s in stored]
        self.scratch.hold(ids)
        try:
            return await score_here(ids, prompt, names, settings, store=self.scratch.store)
        finally:
            self.scratch.release(ids)


RENDER_ACTOR = ray.remote(RenderWorker)
SCORER_ACTOR = ray.remote(ScorerWorker)
VLM_ACTOR = ray.remote(VLMWorker)
