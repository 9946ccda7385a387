"""The vLLM version catalog: flags, metric names, image and command per release.

Generated from the official release wheels by hack/vllm-catalog/ (``make catalog``); see
docs/vllm-versions.md.  Pure (catalog layer): no network, no environment, no kubernetes.
"""

from vllm_operator.catalog.vllm.container import ContainerCommand, container_command, image_for
from vllm_operator.catalog.vllm.errors import ArgsError, Problem, UnknownVersionError
from vllm_operator.catalog.vllm.loader import (
    default_version,
    load_version,
    supported_versions,
)
from vllm_operator.catalog.vllm.metric_names import (
    VllmMetricNames,
    metric_names,
    running_engines,
)
from vllm_operator.catalog.vllm.models import FlagSpec, MetricSpec, VersionCatalog
from vllm_operator.catalog.vllm.validate import (
    OPERATOR_OWNED_FLAGS,
    PLANNER_OWNED_FLAGS,
    check_argv,
    flags_matching,
    render_engine_args,
    render_extra_args,
    unknown_option_message,
    validate_argv,
)

__all__ = [
    "OPERATOR_OWNED_FLAGS",
    "PLANNER_OWNED_FLAGS",
    "ArgsError",
    "ContainerCommand",
    "FlagSpec",
    "MetricSpec",
    "Problem",
    "UnknownVersionError",
    "VersionCatalog",
    "VllmMetricNames",
    "check_argv",
    "container_command",
    "default_version",
    "flags_matching",
    "image_for",
    "load_version",
    "metric_names",
    "render_engine_args",
    "render_extra_args",
    "running_engines",
    "supported_versions",
    "unknown_option_message",
    "validate_argv",
]
