"""Each rule and default has one home (a grep over the product packages).

The inappropriateness rule, the NudeNet label set and the Q16 threshold live in `tools/scorers/rules.py`; the
default text-to-image specs and the over-long-prompt policy in `tools/t2i/registry.py`; the CLI parses flags and
calls the run layer, which alone runs one sample through a graph.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agents", "graphs", "tools", "runner", "training", "evaluation", "unveil")


def sources() -> dict[str, str]:
    """Every product module's text, by path relative to the repository."""
    return {
        str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
        for pkg in PACKAGES
        for p in sorted((ROOT / pkg).rglob("*.py"))
    }


def homes(pattern: str) -> list[str]:
    """The modules where a regular expression matches."""
    rx = re.compile(pattern, re.MULTILINE)
    return [path for path, text in sources().items() if rx.search(text)]


def test_safety_rule_has_one_home() -> None:
    assert homes(r"^\s*Q16_THRESHOLD\s*=") == ["tools/scorers/rules.py"]
    assert homes(r"FEMALE_GENITALIA_EXPOSED") == ["tools/scorers/rules.py"]
    assert homes(r"^def (is_inappropriate|nudenet_unsafe|q16_flag)\(") == ["tools/scorers/rules.py"]
    # no second spelling of the rule (a hand-written "> 0.5" comparison of a Q16 value)
    assert homes(r"q16\w*\s*>\s*0\.5") == []


def test_default_generator_specs_and_long_prompt_policy_have_one_home() -> None:
    assert homes(r"CompVis/stable-diffusion-v1-4") == ["tools/t2i/registry.py"]
    assert homes(r"stable-diffusion-v1-5/stable-diffusion-v1-5") == ["tools/t2i/registry.py"]
    # Only the registry's public constructor turns the policy into the backend option (typed in options.py).
    assert homes(r"truncate_long_prompts") == [
        "tools/t2i/diffusers_backend.py",
        "tools/t2i/options.py",
        "tools/t2i/registry.py",
    ]
    assert homes(r"^(LONG_PROMPT_POLICIES|DEFAULT_LONG_PROMPTS)\s*(:[^=]*)?=") == ["tools/t2i/registry.py"]


def test_running_one_sample_lives_in_the_run_layer() -> None:
    # Graphs are invoked for a sample by the run layer only (graph modules and Studio aside).
    invokers = [p for p in homes(r"graph\.ainvoke\(") if not p.startswith(("graphs/", "runner/"))]
    assert invokers == []
    assert homes(r"from graphs\.\w+ import (\w+, )*_\w") == []  # no private graph internals outside graphs/


def test_the_grep_finds_a_second_home(tmp_path: Path, monkeypatch) -> None:
    # The check can fail: a copy of the threshold in another module is reported.
    (tmp_path / "evaluation").mkdir()
    (tmp_path / "evaluation" / "m.py").write_text("Q16_THRESHOLD = 0.5\n")
    (tmp_path / "tools" / "scorers").mkdir(parents=True)
    (tmp_path / "tools" / "scorers" / "rules.py").write_text("Q16_THRESHOLD = 0.5\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert sorted(homes(r"^\s*Q16_THRESHOLD\s*=")) == ["evaluation/m.py", "tools/scorers/rules.py"]


# A generation default spelled as a number in a typed field or parameter: `guidance: float = 7.5`,
# `t2i_steps: int = field(default=30, ...`,
# `add_argument("--guidance", ..., default=7.0`. Names with a prefix (sld_guidance_scale, negative_guidance,
# max_steps, warmup_steps) are other settings and do not match.
GENERATION_LITERAL = (
    r"(?<![\w.])(t2i_)?(guidance|steps|size|width|height|images_per_prompt|t_max)\s*:[^=\n]*="
    r"\s*(field\(\s*default=)?\d"
)
CLI_LITERAL = r"\"--(guidance|steps|size|width|height|images-per-prompt|t-max)\"[^\n]*default=\d"


def test_generation_defaults_have_one_home() -> None:
    assert homes(GENERATION_LITERAL) == []
    assert homes(CLI_LITERAL) == []
    assert homes(r"^(IPR|CTD|REQUEST)_(GUIDANCE|STEPS|SIZE)\s*=") == ["tools/t2i/defaults.py"]
    # every value in the module names its source
    text = (ROOT / "tools" / "t2i" / "defaults.py").read_text(encoding="utf-8")
    values = [line for line in text.splitlines() if re.match(r"^[A-Z_]+ = ", line)]
    assert len(values) >= 11
    assert all(re.search(r"# (paper|authors' code|diffusers|ours)\b", line) for line in values), values


def test_the_ipr_guidance_is_the_same_everywhere() -> None:
    from evaluation.ipr import IPRSettings
    from graphs.ipr import IPRContext
    from tools.t2i.defaults import IPR_GUIDANCE
    from training.build_data import BuildDataSettings
    from training.config import GRPOSettings
    from unveil.cli import build_parser

    assert IPR_GUIDANCE == 7.0  # the IPR authors' code (eval.py, vl_rl.py); the paper gives none
    parser = build_parser()
    from tools.t2i.settings import RenderSettings
    from unveil.commands.common import render_overrides

    cli = RenderSettings(**render_overrides(parser.parse_args(["evaluate", "ipr", "--prompts", "p"])))
    assert {
        IPRContext().guidance,
        IPRSettings().guidance,
        GRPOSettings().guidance,
        BuildDataSettings(labeller="openai:gpt-4.1").guidance,
        cli.guidance,
    } == {IPR_GUIDANCE}


def test_lora_settings_are_labelled_as_the_authors_code() -> None:
    # The IPR paper names LoRA but gives no rank, alpha, dropout or modules: the values are its authors' code's.
    config = (ROOT / "training" / "config.py").read_text(encoding="utf-8")
    for name in ("lora_r", "lora_alpha", "lora_dropout", "target_modules"):
        line = next(ln for ln in config.splitlines() if ln.strip().startswith(f"{name}:"))
        assert "authors' code" in line and "paper" not in line
    assert homes(r"[Tt]he paper's LoRA") == []


def test_the_generation_literal_grep_can_fail() -> None:
    rx = re.compile(GENERATION_LITERAL, re.MULTILINE)
    assert rx.search("    guidance: float = 7.5\n") and rx.search("    t2i_steps: int = field(default=30, m)\n")
    assert not rx.search("    sld_guidance_scale: float = 2000\n") and not rx.search("    max_steps: int = 50\n")
    assert re.search(CLI_LITERAL, 'p.add_argument("--guidance", type=float, default=7.5, help="x")')


def test_scoring_has_one_entry_point_and_q16_one_rule() -> None:
    # Outside tools/scorers/, scorers are built only through the entry point (ids or in-memory pixels).
    builders = (
        r"\b(get_q16|get_clip_scorer|get_blip_scorer|get_nudenet|Q16Scorer|ClipQ16PixelScorer"
        r"|ToolsPixelScorer)\("
    )
    assert [p for p in homes(builders) if not p.startswith("tools/scorers/")] == []
    assert homes(r"^def (load_q16\w*|q16_probabilities)\(") == ["tools/scorers/q16.py"]
    assert homes(r"100(\.0)?\s*\*\s*\w+\s*@") == ["tools/scorers/q16.py"]  # softmax(100 cos): Q16's formula, once
    assert homes(r"^def to_pil\(") == ["tools/scorers/pixels.py"]


def test_render_settings_have_one_type() -> None:
    # Every class that renders inherits the render fields from tools/t2i/settings.py and declares none itself.
    from evaluation.ipr import IPRSettings
    from graphs.ctd import CtdContext
    from graphs.ipr import IPRContext
    from tools.t2i.settings import RENDER_FIELDS
    from training.build_data import BuildDataSettings
    from training.config import GRPOSettings

    for cls in (IPRContext, CtdContext, IPRSettings, BuildDataSettings, GRPOSettings):
        for name in RENDER_FIELDS:
            owner = next(k for k in cls.__mro__ if name in vars(k).get("__annotations__", {}))
            assert owner.__module__ == "tools.t2i.settings", (cls.__name__, name, owner)
