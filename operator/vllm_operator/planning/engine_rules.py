"""Cross-field rules vLLM's engine configuration enforces at startup, checked before rendering.

Why: an argv can parse and still stop vLLM when it builds its config (chunked prefill turned off
with max_num_batched_tokens below max_model_len raises in SchedulerConfig), and a pod then
crash-loops on an error the operator could have named before applying anything. These rules
combine the planner's values with spec.vllm.extraArgs, so only the effective configuration can
break them; `check-args`, `validate` / `render` and the reconcile all call `check_engine_rules`.

Each rule quotes vLLM's own message and cites where the pinned release raises it. The table is
per version: a rule applies to the releases in [since, until) (and, where the V1 engine forces
a setting, to V0 pools only), read from the source of every release in the catalog (the
generator's cache, ~/.cache/vllm-operator/vllm-src). Only rules whose inputs the spec can reach
are here; a rule whose inputs are unknown (a field neither planned nor given) is skipped, never
guessed. Pure.
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
    engines: frozenset[Engine] | None = None
    """The engines the check can fire on (None: every one)."""

    def applies(self, version: VllmVersion, engine: Engine | None = None) -> bool:
        if not version.at_least(self.since):
            return False
        if engine is not None and self.engines is not None and engine not in self.engines:
            return False
        return self.until is None or not version.at_least(self.until)

    def where(self, version: VllmVersion) -> str:
        """file:function where ``version`` raises it (the source that release was read from)."""
        read = sorted(self.sources, key=lambda v: VllmVersion.parse(v).key())
        at = [v for v in read if version.at_least(v)] or read[:1]
        return self.sources[at[-1]]

    def source(self, version: VllmVersion) -> str:
        return f"vLLM {version.text} {self.where(version)}"


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


def _partial_needs_chunked(config: Config, engine: Engine) -> str | None:
    partial = _int(config, "max_num_partial_prefills")
    if partial is None or partial <= 1 or _chunked(config, engine) is not False:
        return None
    return "Chunked prefill must be enabled to set max_num_partial_prefills > 1."


def _long_partial_at_most(config: Config, engine: Engine) -> str | None:
    long = _int(config, "max_long_partial_prefills")
    partial = _int(config, "max_num_partial_prefills") or 1
    if long is None or long <= partial:
        return None
    return (
        f"self.max_long_partial_prefills={long} must be less than or equal to "
        f"self.max_num_partial_prefills={partial}."
    )


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


_V0_SCHEDULER = "vllm/config.py:SchedulerConfig._verify_args"
_SCHEDULER_ARGS = "vllm/config/scheduler.py:SchedulerConfig._verify_args"
_SCHEDULER_LEN = "vllm/config/scheduler.py:SchedulerConfig.verify_max_model_len"
_V0_PARALLEL = "vllm/config.py:ParallelConfig.__post_init__"
_PARALLEL_INIT = "vllm/config/parallel.py:ParallelConfig.__post_init__"
_PARALLEL = "vllm/config/parallel.py:ParallelConfig._validate_parallel_config"
_V0_ONLY = frozenset({Engine.V0})

# Where each check lives moved twice: vllm/config.py until 0.10.0, the vllm/config/ package from
# 0.10.1.1, and SchedulerConfig.verify_max_model_len / ParallelConfig._validate_parallel_config
# from 0.11.2. Read from every catalog release's source (tests/planning/test_engine_rules_sources.py
# checks each citation against the cached sources).
RULES: tuple[EngineRule, ...] = (
    # From 0.6.6 to 0.11.0 the V1 engine turns chunked prefill on whatever the flag says
    # (arg_utils: "V1 always uses chunked prefills"), so there only V0 pools can break it.
    EngineRule(
        name="chunked-prefill-off-needs-batched-tokens-of-max-model-len",
        since="0.6.0",
        until="0.11.2",
        sources={"0.6.0": _V0_SCHEDULER, "0.10.1.1": _SCHEDULER_ARGS},
        fields=("max_num_batched_tokens", "max_model_len", "enable_chunked_prefill"),
        check=_batched_vs_len,
        engines=_V0_ONLY,
    ),
    EngineRule(
        name="chunked-prefill-off-needs-batched-tokens-of-max-model-len",
        since="0.11.2",
        until=None,
        sources={"0.11.2": _SCHEDULER_LEN},
        fields=("max_num_batched_tokens", "max_model_len", "enable_chunked_prefill"),
        check=_batched_vs_len,
    ),
    EngineRule(
        name="batched-tokens-at-least-max-num-seqs",
        since="0.6.0",
        until=None,
        sources={"0.6.0": _V0_SCHEDULER, "0.10.1.1": _SCHEDULER_ARGS, "0.11.2": _SCHEDULER_LEN},
        fields=("max_num_batched_tokens", "max_num_seqs"),
        check=_batched_vs_seqs,
    ),
    EngineRule(
        name="partial-prefills-need-chunked-prefill",
        since="0.7.3",
        until="0.11.2",
        sources={"0.7.3": _V0_SCHEDULER, "0.10.1.1": _SCHEDULER_ARGS},
        fields=("max_num_partial_prefills", "enable_chunked_prefill"),
        check=_partial_needs_chunked,
        engines=_V0_ONLY,
    ),
    EngineRule(
        name="partial-prefills-need-chunked-prefill",
        since="0.11.2",
        until="0.27.0",
        sources={"0.11.2": _SCHEDULER_LEN},
        fields=("max_num_partial_prefills", "enable_chunked_prefill"),
        check=_partial_needs_chunked,
    ),
    EngineRule(
        name="long-prefill-threshold-within-max-model-len",
        since="0.7.3",
        until="0.27.0",
        sources={"0.7.3": _V0_SCHEDULER, "0.10.1.1": _SCHEDULER_ARGS, "0.11.2": _SCHEDULER_LEN},
        fields=("long_prefill_token_threshold", "max_model_len", "max_num_partial_prefills"),
        check=_threshold_vs_len_partial,
    ),
    EngineRule(
        name="long-prefill-threshold-within-max-model-len",
        since="0.27.0",
        until=None,
        sources={"0.27.0": _SCHEDULER_LEN},
        fields=("long_prefill_token_threshold", "max_model_len"),
        check=_threshold_vs_len,
    ),
    EngineRule(
        name="long-partial-prefills-within-partial-prefills",
        since="0.7.3",
        until="0.11.2",
        sources={"0.7.3": _V0_SCHEDULER, "0.10.1.1": _SCHEDULER_ARGS},
        fields=("max_long_partial_prefills", "max_num_partial_prefills"),
        check=_long_partial_range,
    ),
    EngineRule(
        name="long-partial-prefills-within-partial-prefills",
        since="0.11.2",
        until="0.27.0",
        sources={"0.11.2": _SCHEDULER_LEN},
        fields=("max_long_partial_prefills", "max_num_partial_prefills"),
        check=_long_partial_at_most,
    ),
    EngineRule(
        name="active-seqs-within-max-num-seqs",
        since="0.31.0",
        until=None,
        sources={"0.31.0": _SCHEDULER_LEN},
        fields=("max_num_active_seqs", "max_num_seqs"),
        check=_active_vs_seqs,
    ),
    EngineRule(
        name="local-data-parallel-within-data-parallel",
        since="0.9.0",
        until=None,
        sources={"0.9.0": _V0_PARALLEL, "0.10.1.1": _PARALLEL_INIT, "0.11.2": _PARALLEL},
        fields=("data_parallel_size_local", "data_parallel_size"),
        check=_dp_local,
    ),
    EngineRule(
        name="external-lb-needs-data-parallel",
        since="0.9.2",
        until=None,
        sources={"0.9.2": _V0_PARALLEL, "0.10.1.1": _PARALLEL_INIT, "0.11.2": _PARALLEL},
        fields=("data_parallel_external_lb", "data_parallel_size"),
        check=_dp_external_lb,
    ),
    EngineRule(
        name="eplb-needs-expert-parallel",
        since="0.10.0",
        until=None,
        sources={"0.10.0": _V0_PARALLEL, "0.10.1.1": _PARALLEL_INIT, "0.11.2": _PARALLEL},
        fields=("enable_eplb", "enable_expert_parallel"),
        check=_eplb_needs_ep,
    ),
    EngineRule(
        name="tensor-parallel-divisible-by-decode-context-parallel",
        since="0.26.0",
        until=None,
        sources={"0.26.0": _PARALLEL},
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
        if not rule.applies(parsed, run):
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
