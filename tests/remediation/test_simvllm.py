"""The simulated vLLM serves the pinned version's exposition, driven by its scenario's time axis."""

import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from e2e.simvllm.scenario import SCENARIO_DIR, Scenario, load_scenario
from e2e.simvllm.server import SimPod
from prometheus_client.parser import text_string_to_metric_families

from vllm_operator.metrics.names import metric_names


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def scrape(pod: SimPod) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://{pod.address}/metrics", timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


Serve = Callable[[str | Scenario, str], SimPod]


@pytest.fixture
def serve(clock: FakeClock) -> Iterator[Serve]:
    started: list[SimPod] = []

    def start(scenario: str | Scenario, version: str) -> SimPod:
        sc = load_scenario(scenario) if isinstance(scenario, str) else scenario
        pod = SimPod("p", sc, version=version, monotonic=clock).start()
        started.append(pod)
        return pod

    yield start
    for pod in started:
        pod.stop()


@pytest.mark.parametrize("version", ["0.6.0", "0.8.0", "0.11.0", "0.33.0"])
def test_exposition_uses_the_versions_names_and_labels(
    serve: Serve, clock: FakeClock, version: str
) -> None:
    pod = serve("kv-saturation", version)
    clock.t = 30
    samples = scrape(pod)
    names = metric_names(version)
    assert names.kv_usage[0] in samples
    assert "vllm:num_preemptions_total" in samples  # counters end in _total
    assert "vllm:time_to_first_token_seconds_bucket" in samples
    assert "vllm:time_to_first_token_seconds_count" in samples
    assert "vllm:cache_config_info" in samples
    labels, value = samples[names.kv_usage[0]][0]
    assert value == pytest.approx(0.98)
    assert labels["model_name"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert ("engine" in labels) == names.engine_label
    if version == "0.33.0":
        assert "vllm:gpu_cache_usage_perc" not in samples  # removed in 0.12
    if version == "0.6.0":
        assert "vllm:kv_cache_usage_perc" not in samples  # V0 never had it
        assert "vllm:gpu_prefix_cache_hit_rate" in samples


def test_counters_integrate_the_scenarios_rates(serve: Serve, clock: FakeClock) -> None:
    pod = serve("kv-saturation", "0.11.0")
    clock.t = 20
    first = scrape(pod)["vllm:num_preemptions_total"][0][1]
    clock.t = 40
    second = scrape(pod)["vllm:num_preemptions_total"][0][1]
    assert second - first == pytest.approx(0.5 * 20, abs=1)
    hits = scrape(pod)["vllm:prefix_cache_hits_total"][0][1]
    queries = scrape(pod)["vllm:prefix_cache_queries_total"][0][1]
    assert hits / queries == pytest.approx(0.6, abs=0.01)


def test_histograms_are_cumulative(serve: Serve, clock: FakeClock) -> None:
    pod = serve("steady", "0.11.0")
    clock.t = 100
    buckets = [v for _, v in scrape(pod)["vllm:e2e_request_latency_seconds_bucket"]]
    assert buckets == sorted(buckets) and buckets[-1] > 0


def test_engines_split_counts(serve: Serve, clock: FakeClock) -> None:
    pod = serve(load_scenario("kv-saturation").model_copy(update={"engines": 2}), "0.11.0")
    clock.t = 30
    running = scrape(pod)["vllm:num_requests_running"]
    assert sorted(lab["engine"] for lab, _ in running) == ["0", "1"]
    assert sum(v for _, v in running) == pytest.approx(16)


def test_crash_phase_kills_the_pod(
    serve: Serve, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = serve("burst-oom", "0.11.0")
    with urllib.request.urlopen(f"http://{pod.address}/health", timeout=5) as r:
        assert r.status == 200
    clock.t = 16
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://{pod.address}/health", timeout=5)
    assert err.value.code == 503
    err.value.close()
    assert "torch.OutOfMemoryError: CUDA out of memory" in capsys.readouterr().err


def test_dcgm_memory_rides_along_in_mib(serve: Serve, clock: FakeClock) -> None:
    pod = serve("chronic-creep", "0.11.0")
    clock.t = 40
    ((labels, value),) = scrape(pod)["DCGM_FI_DEV_FB_USED"]
    assert value == pytest.approx(21.8 * 1024, abs=1)
    assert "pod" not in labels  # Prometheus' target labels name the pod


@pytest.mark.parametrize("path", sorted(SCENARIO_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_scenario_file_loads(path: object) -> None:
    sc = load_scenario(str(path))
    assert sc.phases and sc.description
    sc.state_at(0)
    sc.state_at(10_000)


def test_ramps_and_holds() -> None:
    sc = load_scenario("chronic-creep")
    assert sc.state_at(0).gpu_memory_gib == pytest.approx(20.0)
    assert sc.state_at(10).gpu_memory_gib == pytest.approx(20.9)
    assert sc.state_at(1000).gpu_memory_gib == pytest.approx(21.8)
