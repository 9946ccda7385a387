"""The operator's own Prometheus metrics (reconciles, durations, errors, plans, API writes).

Served by `vllm-operator run` on its metrics port; the PrometheusRule's reconcile-error alert and
the dashboard read these names.
"""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILES = Counter(
    "vllm_operator_reconciles",
    "Reconciles of VLLMServices by result (ok, error, invalid).",
    ["result"],
    registry=REGISTRY,
)
RECONCILE_SECONDS = Histogram(
    "vllm_operator_reconcile_duration_seconds",
    "Wall time of one reconcile of one VLLMService.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "vllm_operator_reconcile_errors",
    "Reconciles that failed and will be retried, by reason.",
    ["reason"],
    registry=REGISTRY,
)
API_WRITES = Counter(
    "vllm_operator_api_writes",
    "Write calls to the Kubernetes API by kind (apply, status, event).",
    ["kind"],
    registry=REGISTRY,
)
PLANS = Gauge(
    "vllm_operator_pool_plans",
    "Planned pools by GPU type and feasibility.",
    ["gpu_type", "feasible"],
    registry=REGISTRY,
)
REMEDIATIONS = Counter(
    "vllm_operator_remediation_actions",
    "Remediation actions by kind and mode (auto applies, recommend only reports).",
    ["action", "mode"],
    registry=REGISTRY,
)
