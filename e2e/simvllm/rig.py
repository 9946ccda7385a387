"""Simulated vLLM pods scraped by a real Prometheus, as one context manager for e2e tests.

    with scraped_pods({"chat-l4-0": "steady", "chat-l4-1": "kv-saturation"},
                      namespace="llm", version="0.11.0") as rig:
        rig.wait_scraped()
        ...  # point the operator's PrometheusSignals at rig.url
        rig.switch("chat-l4-1", "steady")   # recovery
        rig.prometheus.stop()               # "Prometheus down"

Each pod is labelled `namespace`/`pod` in Prometheus, as a PodMonitor's relabelling would; name
the simulated pods after the (KWOK) pods of the pool so the operator's queries find them.
"""

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from e2e.prometheus import LocalPrometheus, Target, find_prometheus
from e2e.simvllm.scenario import load_scenario
from e2e.simvllm.server import SimFleet, SimPod


@dataclass
class ScrapedPods:
    prometheus: LocalPrometheus
    pods: dict[str, SimPod]

    @property
    def url(self) -> str:
        return self.prometheus.url

    def wait_scraped(self, timeout: float = 30.0) -> None:
        """Until every pod that is not crashed has been scraped successfully."""
        alive = sum(1 for p in self.pods.values() if not p.crashed.is_set())
        self.prometheus.wait_until(
            lambda: len(self.prometheus.query('up{job="vllm"} == 1')) >= alive,
            timeout,
            f"{alive} simulated pods scraped",
        )

    def switch(self, pod: str, scenario: str) -> None:
        self.pods[pod].set_scenario(load_scenario(scenario))


@contextmanager
def scraped_pods(
    scenarios: Mapping[str, str],
    *,
    namespace: str,
    version: str,
    speed: float = 1.0,
    scrape_interval: str = "1s",
) -> Iterator[ScrapedPods]:
    """Start one simulated pod per entry (pod name -> scenario) and a Prometheus scraping them.

    Raises e2e.prometheus.PrometheusUnavailable when the binary is not built.
    """
    binary = find_prometheus()
    pods = {
        name: SimPod(name, load_scenario(scenario), version=version, speed=speed)
        for name, scenario in scenarios.items()
    }
    targets = [Target(p.address, {"namespace": namespace, "pod": name}) for name, p in pods.items()]
    with (
        SimFleet(pods.values()),
        LocalPrometheus(binary, targets, scrape_interval=scrape_interval) as prom,
    ):
        yield ScrapedPods(prom, pods)
