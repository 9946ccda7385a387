"""Cross-field rules vLLM's engine configuration enforces at startup, checked before rendering.

Why: an argv can parse and still stop vLLM when it builds its config (chunked prefill turned off
with max_num_batched_tokens below max_model_len raises in SchedulerConfig), and a pod then
crash-loops on an error the operator could have named before applying anything. These rules
combine the planner's values with spec.vllm.extraArgs, so only the effective configuration can
break them; `check-args`, `validate` / `render` and the reconcile all call `check_engine_rules`.

Each rule quotes vLLM's own message and cites where vLLM raises it. The table is per version:
a rule applies to the releases in [since, until) and cites the source of the newest release it
was read from at or below the pinned one (sources read: 0.11.0 and 0.33.0 in
~/.cache/vllm-operator/vllm-src; `vllm/config.py` for the releases before the config package).
Only rules whose inputs the spec can reach are here; a rule whose inputs are unknown (a field
neither planned nor given) is skipped, never guessed. Pure.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from vllm_operator.planning.versions import Engine, VllmVersion, v0_chunked_prefill

ConfigValue = int | float | bool | str | None
Config = Mapping[str, ConfigValue]


@dataclass(frozen=True)
class Violation:
    """A rule the effective configuration breaks: vLLM's message and where it raises it."""

    rule: str
    message: str
    source: str
    fields: tuple[str, ...]

    def describe(self, origins: Mapping[str, str] | None = None) -> str:
        """The quoted rule, the source and, when known, where each value came from."""
        where = ""
        if origins:
            parts = [f"{f} from {origins[f]}" for f in self.fields if f in origins]
            where = f" ({', '.join(parts)})" if parts else ""
        return f'vLLM would refuse to start: "{self.message}" [{self.source}]{where}'


@dataclass(frozen=True)
class EngineRule:
    """One startup check of vLLM's config classes."""

    name: str
    since: str
    until: str | None
    sources: Mapping[str, str]
    """Release the source was read from -> file:function where vLLM raises."""
    fields: tuple[str, ...]
    check: Callable[[Config, Engine], str | None]
    """The quoted message when the rule is broken, None when it holds or inputs are unknown."""

    def applies(self, version: VllmVersion) -> bool:
        if not version.at_least(self.since):
            return False
        return self.until is None or not version.at_least(self.until)

    def source(self, version: VllmVersion) -> str:
        read = sorted(self.sources, key=lambda v: VllmVersion.parse(v).key())
        at = [v for v in read if version.at_least(v)] or read[:1]
        return f"vLLM {at[-1]} {self.sources[at[-1]]}"


def _int(config: Config, field: str) -> int | None:
    value = config.get(field)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _chunked(config: Config, engine: Engine) -> bool | None:
    """Whether chunked prefill is on: the explicit value, else the engine's default."""
    value = config.get("enable_chunked_prefill")
    if isinstance(value, bool):
        return value
    if engine is Engine.V1:
        return True
    max_len = _int(config, "max_model_len")
    return None if max_len is None else v0_chunked_prefill(max_len)


def _batched_vs_len(config: Config, engine: Engine) -> str | None:
    batched, max_len = _int(config, "max_num_batched_tokens"), _int(config, "max_model_len")
    if batched is None or max_len is None or max_len < 0 or _chunked(config, engine) is not False:
        return None
    if batched >= max_len:
        return None
    return (
        f"max_num_batched_tokens ({batched}) is smaller than max_model_len ({max_len}). This "
        "effectively limits the maximum sequence length to max_num_batched_tokens and makes "
        "vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease "
        "max_model_len."
    )


def _batched_vs_seqs(config: Config, engine: Engine) -> str | None:
    batched, seqs = _int(config, "max_num_batched_tokens"), _int(config, "max_num_seqs")
    if batched is None or seqs is None or batched >= seqs:
        return None
    return (
        f"max_num_batched_tokens ({batched}) must be greater than or equal to max_num_seqs "
        f"({seqs})."
    )


def _threshold_vs_len(config: Config, engine: Engine) -> str | None:
    threshold, max_len = (
        _int(config, "long_prefill_token_threshold"),
        _int(config, "max_model_len"),
    )
    if threshold is None or max_len is None or max_len < 0 or threshold <= max_len:
        return None
    return (
        f"long_prefill_token_threshold ({threshold}) cannot be greater than the max_model_len "
        f"({max_len})."
    )


def _threshold_vs_len_partial(config: Config, engine: Engine) -> str | None:
    partial = _int(config, "max_num_partial_prefills")
    if partial is None or partial <= 1:
        return None
    return _threshold_vs_len(config, engine)


def _long_partial_range(config: Config, engine: Engine) -> str | None:
    long = _int(config, "max_long_partial_prefills")
    if long is None:
        return None
    partial = _int(config, "max_num_partial_prefills") or 1
    if 1 <= long <= partial:
        return None
    return (
        f"max_long_partial_prefills ({long}) must be greater than or equal to 1 and less than "
        f"or equal to max_num_partial_prefills ({partial})."
    )


def _active_vs_seqs(config: Config, engine: Engine) -> str | None:
    active, seqs = _int(config, "max_num_active_seqs"), _int(config, "max_num_seqs")
    if active is None or seqs is None or active <= seqs:
        return None
    return f"max_num_active_seqs ({active}) cannot be greater than max_num_seqs ({seqs})."


def _dp_local(config: Config, engine: Engine) -> str | None:
    local, dp = _int(config, "data_parallel_size_local"), _int(config, "data_parallel_size") or 1
    if local is None or local <= dp:
        return None
    return f"data_parallel_size_local ({local}) must be <= data_parallel_size ({dp})"


def _dp_external_lb(config: Config, engine: Engine) -> str | None:
    if config.get("data_parallel_external_lb") is not True:
        return None
    if (_int(config, "data_parallel_size") or 1) > 1:
        return None
    return "data_parallel_external_lb can only be set when data_parallel_size > 1"


def _eplb_needs_ep(config: Config, engine: Engine) -> str | None:
    if config.get("enable_eplb") is not True or config.get("enable_expert_parallel") is True:
        return None
    return "enable_expert_parallel must be True to use EPLB."


def _tp_dcp(config: Config, engine: Engine) -> str | None:
    dcp, tp = _int(config, "decode_context_parallel_size"), _int(config, "tensor_parallel_size")
    pcp = _int(config, "prefill_context_parallel_size") or 1
    if dcp is None or tp is None or pcp != 1 or dcp < 1 or tp % dcp == 0:
        return None
    return f"tp_size={tp} must be divisible by dcp_size={dcp}."


_SCHEDULER = "vllm/config/scheduler.py"
_PARALLEL = "vllm/config/parallel.py"

RULES: tuple[EngineRule, ...] = (
    # V1 turns chunked prefill on whatever the flag says from 0.8 (arg_utils
    # _set_default_args_v1, then _set_default_args in 0.11): the check cannot fire there.
    EngineRule(
        name="chunked-prefill-off-needs-batched-tokens-of-max-model-len",
        since="0.6.0",
        until="0.8.0",
        sources={"0.6.0": "vllm/config.py:SchedulerConfig._verify_args"},
        fields=("max_num_batched_tokens", "max_model_len", "enable_chunked_prefill"),
        check=_batched_vs_len,
    ),
    # 0.11 also forces chunked prefill on for generative models (arg_utils
    # EngineArgs._set_default_args); 0.33 honours --no-enable-chunked-prefill.
    EngineRule(
        name="chunked-prefill-off-needs-batched-tokens-of-max-model-len",
        since="0.33.0",
        until=None,
        sources={"0.33.0": f"{_SCHEDULER}:SchedulerConfig.verify_max_model_len"},
        fields=("max_num_batched_tokens", "max_model_len", "enable_chunked_prefill"),
        check=_batched_vs_len,
    ),
    EngineRule(
        name="batched-tokens-at-least-max-num-seqs",
        since="0.6.0",
        until=None,
        sources={
            "0.6.0": "vllm/config.py:SchedulerConfig._verify_args",
            "0.11.0": f"{_SCHEDULER}:SchedulerConfig._verify_args",
            "0.33.0": f"{_SCHEDULER}:SchedulerConfig.verify_max_model_len",
        },
        fields=("max_num_batched_tokens", "max_num_seqs"),
        check=_batched_vs_seqs,
    ),
    EngineRule(
        name="long-prefill-threshold-within-max-model-len",
        since="0.11.0",
        until="0.33.0",
        sources={"0.11.0": f"{_SCHEDULER}:SchedulerConfig._verify_args"},
        fields=("long_prefill_token_threshold", "max_model_len", "max_num_partial_prefills"),
        check=_threshold_vs_len_partial,
    ),
    EngineRule(
        name="long-prefill-threshold-within-max-model-len",
        since="0.33.0",
        until=None,
        sources={"0.33.0": f"{_SCHEDULER}:SchedulerConfig.verify_max_model_len"},
        fields=("long_prefill_token_threshold", "max_model_len"),
        check=_threshold_vs_len,
    ),
    EngineRule(
        name="long-partial-prefills-within-partial-prefills",
        since="0.11.0",
        until="0.33.0",
        sources={"0.11.0": f"{_SCHEDULER}:SchedulerConfig._verify_args"},
        fields=("max_long_partial_prefills", "max_num_partial_prefills"),
        check=_long_partial_range,
    ),
    EngineRule(
        name="active-seqs-within-max-num-seqs",
        since="0.33.0",
        until=None,
        sources={"0.33.0": f"{_SCHEDULER}:SchedulerConfig.verify_max_model_len"},
        fields=("max_num_active_seqs", "max_num_seqs"),
        check=_active_vs_seqs,
    ),
    EngineRule(
        name="local-data-parallel-within-data-parallel",
        since="0.11.0",
        until=None,
        sources={
            "0.11.0": f"{_PARALLEL}:ParallelConfig.__post_init__",
            "0.33.0": f"{_PARALLEL}:ParallelConfig._validate_parallel_config",
        },
        fields=("data_parallel_size_local", "data_parallel_size"),
        check=_dp_local,
    ),
    EngineRule(
        name="external-lb-needs-data-parallel",
        since="0.11.0",
        until=None,
        sources={
            "0.11.0": f"{_PARALLEL}:ParallelConfig.__post_init__",
            "0.33.0": f"{_PARALLEL}:ParallelConfig._validate_parallel_config",
        },
        fields=("data_parallel_external_lb", "data_parallel_size"),
        check=_dp_external_lb,
    ),
    EngineRule(
        name="eplb-needs-expert-parallel",
        since="0.11.0",
        until=None,
        sources={
            "0.11.0": f"{_PARALLEL}:ParallelConfig.__post_init__",
            "0.33.0": f"{_PARALLEL}:ParallelConfig._validate_parallel_config",
        },
        fields=("enable_eplb", "enable_expert_parallel"),
        check=_eplb_needs_ep,
    ),
    EngineRule(
        name="tensor-parallel-divisible-by-decode-context-parallel",
        since="0.33.0",
        until=None,
        sources={"0.33.0": f"{_PARALLEL}:ParallelConfig._validate_parallel_config"},
        fields=("tensor_parallel_size", "decode_context_parallel_size"),
        check=_tp_dcp,
    ),
)
"""Every rule, in the order vLLM checks them (scheduler, then parallel)."""


def default_engine(version: VllmVersion) -> Engine:
    """The engine a release runs when nothing forces V0 (V1 by default from 0.8)."""
    return Engine.V1 if version.at_least("0.8.0") else Engine.V0


def check_engine_rules(
    version: str, config: Config, *, engine: Engine | None = None
) -> list[Violation]:
    """The rules of ``version`` the effective ``config`` (vLLM field name -> value) breaks.

    ``engine``: the engine the pool runs (the plan's); by default the release's default one.
    """
    parsed = VllmVersion.parse(version)
    run = engine or default_engine(parsed)
    out: list[Violation] = []
    for rule in RULES:
        if not rule.applies(parsed):
            continue
        message = rule.check(config, run)
        if message is not None:
            out.append(
                Violation(
                    rule=rule.name, message=message, source=rule.source(parsed), fields=rule.fields
                )
            )
    return out


__all__ = ["RULES", "EngineRule", "Violation", "check_engine_rules", "default_engine"]
