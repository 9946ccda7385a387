"""Speculative decoding, LoRA and the vision encoder's profiling, as far as memory is concerned,
read from the spec's extraArgs.

The VLLMService API has no field for either: users pass vLLM's own flags in `vllm.extraArgs`
(`--speculative-config '{"method": "mtp", "num_speculative_tokens": 2}'`, `--enable-lora
--max-loras 4 --max-lora-rank 64`). The planner reads them so that the draft's weights and KV and
the LoRA slot buffers are in the memory plan instead of surprising vLLM at startup.
"""

import json
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.planning.errors import PlanningInputError

# vLLM's LoRAConfig defaults (config/lora.py: max_loras 1, max_lora_rank 16).
DEFAULT_MAX_LORAS = 1
DEFAULT_MAX_LORA_RANK = 16


class Adapters(BaseModel):
    """Speculative decoding and LoRA settings that change vLLM's memory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    speculative_method: str | None = Field(
        default=None, description="vLLM's speculative method (mtp, eagle, eagle3, ngram, ...)."
    )
    num_speculative_tokens: int = Field(default=0, ge=0)
    max_loras: int = Field(default=0, ge=0, description="LoRA slots on the GPU; 0: LoRA off.")
    max_lora_rank: int = Field(default=DEFAULT_MAX_LORA_RANK, ge=1)
    # the vision encoder's pass in vLLM's profile run (planning/memory.py encoder_profile_bytes)
    skip_mm_profiling: bool = False
    language_model_only: bool = False
    limit_mm_per_prompt: dict[str, int] | None = None
    mm_encoder_tp_mode: str = "weights"
    # --attention-backend: FlashInfer's decode wrappers enter the CUDA-graph estimate
    # (planning/memory.py flashinfer_graph_bytes); None lets vLLM pick
    attention_backend: str | None = None


def _flag(extra_args: Mapping[str, str], name: str) -> str | None:
    for key in (name, name.replace("-", "_")):
        if key in extra_args:
            return extra_args[key]
    return None


def _int(extra_args: Mapping[str, str], name: str, default: int) -> int:
    text = _flag(extra_args, name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise PlanningInputError(
            f"spec.vllm.extraArgs[{name}]", f"{text!r} is not an integer"
        ) from None


def _bool_flag(extra_args: Mapping[str, str], name: str) -> bool:
    text = _flag(extra_args, name)
    return text is not None and text.strip().lower() not in ("false", "0")


def _mm_limits(extra_args: Mapping[str, str]) -> dict[str, int] | None:
    """--limit-mm-per-prompt as counts per modality: vLLM 0.2x-0.33 take a JSON object whose
    values are a count or an object with a `count` (config/multimodal.py, 'Legacy format (count
    only): {"image": 16, "video": 2}'); a missing count is vLLM's default, 999."""
    text = _flag(extra_args, "--limit-mm-per-prompt")
    if not text:
        return None
    field = "spec.vllm.extraArgs[--limit-mm-per-prompt]"
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanningInputError(field, f"is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise PlanningInputError(field, "is not a JSON object")
    limits: dict[str, int] = {}
    for modality, value in raw.items():
        count = value.get("count", 999) if isinstance(value, dict) else value
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise PlanningInputError(field, f"{modality}: {count!r} is not a count")
        limits[str(modality)] = count
    return limits


def adapters_from_extra_args(extra_args: Mapping[str, str]) -> Adapters:
    """Adapters from `vllm.extraArgs` (flag -> value; a bare flag has an empty value)."""
    method: str | None = None
    tokens = 0
    spec_text = _flag(extra_args, "--speculative-config")
    if spec_text:
        try:
            spec = json.loads(spec_text)
        except json.JSONDecodeError as exc:
            raise PlanningInputError(
                "spec.vllm.extraArgs[--speculative-config]", f"is not JSON: {exc}"
            ) from None
        if not isinstance(spec, dict):
            raise PlanningInputError(
                "spec.vllm.extraArgs[--speculative-config]", "is not a JSON object"
            )
        method = str(spec.get("method") or ("draft_model" if spec.get("model") else "")) or None
        raw = spec.get("num_speculative_tokens")
        # vLLM's SpeculativeConfig types it `int` (pydantic: 2.0 passes, 2.5 / "2" / true do
        # not); refused here by name rather than crashing the planner with int()'s error.
        if raw is None:
            tokens = 0
        elif isinstance(raw, bool) or not isinstance(raw, int | float) or raw != int(raw):
            raise PlanningInputError(
                "spec.vllm.extraArgs[--speculative-config].num_speculative_tokens",
                f"{raw!r} is not an integer",
            )
        elif raw < 0:
            raise PlanningInputError(
                "spec.vllm.extraArgs[--speculative-config].num_speculative_tokens",
                f"{raw!r} is negative",
            )
        else:
            tokens = int(raw)
    lora_flag = _flag(extra_args, "--enable-lora")
    lora = lora_flag is not None and lora_flag.strip().lower() not in ("false", "0")
    return Adapters(
        speculative_method=method,
        num_speculative_tokens=tokens,
        max_loras=_int(extra_args, "--max-loras", DEFAULT_MAX_LORAS) if lora else 0,
        max_lora_rank=_int(extra_args, "--max-lora-rank", DEFAULT_MAX_LORA_RANK),
        skip_mm_profiling=_bool_flag(extra_args, "--skip-mm-profiling"),
        language_model_only=_bool_flag(extra_args, "--language-model-only"),
        limit_mm_per_prompt=_mm_limits(extra_args),
        mm_encoder_tp_mode=_tp_mode(extra_args),
        attention_backend=(_flag(extra_args, "--attention-backend") or "").strip().upper() or None,
    )


def _tp_mode(extra_args: Mapping[str, str]) -> str:
    """--mm-encoder-tp-mode: vLLM's choices are weights (the default) and data (the flag catalog,
    catalog/vllm/data/0.33.0.json)."""
    mode = _flag(extra_args, "--mm-encoder-tp-mode") or "weights"
    if mode not in ("weights", "data"):
        raise PlanningInputError(
            "spec.vllm.extraArgs[--mm-encoder-tp-mode]", f"{mode!r}; accepted: weights, data"
        )
    return mode
