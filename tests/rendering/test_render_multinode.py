"""Multi-node pools render as one LeaderWorkerSet; single-node pools keep their Deployments.

Goldens live in tests/rendering/golden/multinode/: one rendered from a hand-built plan (TP=8 x
PP=2, the seam's contract, independent of the planner) and one per example in
examples/multinode/ (`vllm-operator render`). The API server checks them by server-side dry-run
with the LeaderWorkerSet CRD and webhooks installed (e2e/test_render_dryrun.py), the pinned vLLM's
real parser checks the leader's and the workers' argv (tests/conformance/test_golden_argv.py).
Regenerate with `UPDATE_GOLDENS=1 .venv/bin/pytest tests/rendering` and review the diff.
"""

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from vllm_operator.api.crd import dump_yaml
from vllm_operator.api.groups import pod_group
from vllm_operator.api.reasons import Reason
from vllm_operator.api.service import VLLMService
from vllm_operator.cli.main import cli
from vllm_operator.rendering.args import ArgsRejected, multinode_argv
from vllm_operator.rendering.workload import PoolRender, plan_hash, render_workload

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden" / "multinode"
EXAMPLES = sorted((REPO / "examples" / "multinode").glob("*.yaml"))
MODEL = "meta-llama/Llama-3.1-405B-Instruct"
H100 = "NVIDIA-H100-80GB-HBM3"


def service(uid: str = "") -> VLLMService:
    meta: dict[str, Any] = {"name": "llama-405b", "namespace": "default"}
    if uid:
        meta["uid"] = uid
    return VLLMService.model_validate(
        {
            "apiVersion": "serving.vllm-operator.dev/v1alpha1",
            "kind": "VLLMService",
            "metadata": meta,
            "spec": {
                "model": {"name": MODEL},
                "vllm": {"version": "0.33.0"},
                "workload": {"p99ContextTokens": 8192, "concurrency": 32},
                "placement": {
                    "gpuTypes": [H100],
                    "maxGPUsPerReplica": 8,
                    "maxNodesPerReplica": 2,
                },
            },
        }
    )


def pool(nodes: int = 2, version: str = "0.33.0") -> PoolRender:
    leader, worker = multinode_argv(version, nodes) if nodes > 1 else ([], [])
    return PoolRender(
        gpu_type=H100,
        gpus_per_replica=8,
        nodes_per_replica=nodes,
        leader_argv=leader,
        worker_argv=worker,
        replicas=1,
        image="vllm/vllm-openai:v0.33.0",
        command=["vllm", "serve"],
        model_args=[MODEL],
        engine_argv=[
            "--tensor-parallel-size",
            "8",
            "--pipeline-parallel-size",
            str(nodes),
            "--max-model-len",
            "32768",
            "--max-num-seqs",
            "32",
            "--enable-prefix-caching",
        ],
        weights_gib_total=378.0,
        host_memory_gib=160,
        shm_gib=16,
    )


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDENS"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden {path.name}: run UPDATE_GOLDENS=1 pytest tests/rendering"
    assert text == path.read_text(), f"{path.name} changed: review, then UPDATE_GOLDENS=1"


def test_a_tp8_pp2_plan_renders_the_golden_leader_worker_set() -> None:
    obj = render_workload(service("0a1b2c3d-uid"), pool())
    check_golden("llama-3.1-405b-tp8-pp2.vllm-0.33.0.yaml", dump_yaml(obj))


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_multinode_examples_render_their_golden(example: Path) -> None:
    result = CliRunner().invoke(cli, ["render", str(example)])
    assert result.exit_code == 0, result.output
    version = yaml.safe_load(example.read_text())["spec"]["vllm"]["version"]
    check_golden(f"{example.stem}.vllm-{version}.yaml", result.output)
    kinds = [d["kind"] for d in yaml.safe_load_all(result.output)]
    assert "LeaderWorkerSet" in kinds and "Deployment" not in kinds


def _templates(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    lwt = obj["spec"]["leaderWorkerTemplate"]
    return lwt["leaderTemplate"], lwt["workerTemplate"]


def test_group_size_is_the_node_count_and_each_pod_gets_one_stage_of_gpus() -> None:
    obj = render_workload(service(), pool(nodes=3))
    assert obj["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert obj["kind"] == "LeaderWorkerSet"
    lwt = obj["spec"]["leaderWorkerTemplate"]
    assert lwt["size"] == 3
    assert lwt["restartPolicy"] == "RecreateGroupOnPodRestart"
    # The leader waits for its workers before it is Ready: LeaderReady would deadlock.
    assert obj["spec"]["startupPolicy"] == "LeaderCreated"
    for template in _templates(obj):
        (container,) = template["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert container["resources"]["requests"]["nvidia.com/gpu"] == "8"
        assert template["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == H100
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert "/dev/shm" in mounts
        env = {e["name"]: e for e in container["env"]}
        assert env["NCCL_SOCKET_IFNAME"]["value"] == env["GLOO_SOCKET_IFNAME"]["value"] == "eth0"
        assert env["VLLM_HOST_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_only_the_leader_serves_and_is_probed_and_workers_run_headless() -> None:
    leader, worker = _templates(render_workload(service(), pool()))
    (lc,) = leader["spec"]["containers"]
    (wc,) = worker["spec"]["containers"]
    assert leader["metadata"]["labels"]["serving.vllm-operator.dev/serving"] == "true"
    assert "serving.vllm-operator.dev/serving" not in worker["metadata"]["labels"]
    assert {"startupProbe", "readinessProbe", "livenessProbe"} <= set(lc)
    assert not {"startupProbe", "readinessProbe", "livenessProbe", "ports"} & set(wc)
    assert lc["args"][lc["args"].index("--node-rank") + 1] == "0"
    assert "--headless" not in lc["args"]
    assert wc["args"][wc["args"].index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
    assert "--headless" in wc["args"]
    for args in (lc["args"], wc["args"]):
        assert args[args.index("--nnodes") + 1] == "2"
        assert args[args.index("--master-addr") + 1] == "$(LWS_LEADER_ADDRESS)"
        assert args[args.index("--pipeline-parallel-size") + 1] == "2"


def test_deleting_the_service_cascades_to_the_leader_worker_set() -> None:
    obj = render_workload(service("0a1b2c3d-uid"), pool())
    (ref,) = obj["metadata"]["ownerReferences"]
    assert ref["kind"] == "VLLMService" and ref["uid"] == "0a1b2c3d-uid" and ref["controller"]


def test_single_node_pools_keep_their_deployment_and_plan_hash() -> None:
    single = pool(nodes=1)
    obj = render_workload(service(), single)
    assert obj["kind"] == "Deployment"
    # Multi-node fields do not enter a single-node hash: existing pods never roll on upgrade.
    assert plan_hash(service(), single) == plan_hash(
        service(), single.model_copy(update={"leader_argv": [], "worker_argv": []})
    )
    assert plan_hash(service(), pool(nodes=2)) != plan_hash(service(), pool(nodes=3))


def test_versions_without_vllm_multi_node_flags_are_refused_naming_the_first_with_them() -> None:
    with pytest.raises(ArgsRejected) as err:
        multinode_argv("0.11.0", 2)
    assert err.value.reason is Reason.UNSUPPORTED_ENGINE_ARGS
    assert "--nnodes" in str(err.value) and "0.11.2" in str(err.value)
    leader, worker = multinode_argv("0.11.2", 2)
    assert "--headless" in worker and "--headless" not in leader


def test_pod_group_reads_the_leader_worker_set_labels() -> None:
    labels = {
        "leaderworkerset.sigs.k8s.io/name": "llama-405b-h100-80gb",
        "leaderworkerset.sigs.k8s.io/group-index": "1",
        "leaderworkerset.sigs.k8s.io/worker-index": "1",
    }
    assert pod_group(labels) == ("llama-405b-h100-80gb", "1")
    assert pod_group({"app": "x"}) is None
