"""Simulated vLLM pods scraped by a real Prometheus, as one context manager for e2e tests.

    with scraped_pods({"chat-l4-0": "steady", "chat-l4-1": "kv-saturation"},
                      namespace="llm", version="0.11.0") as rig:
        rig.wait_scraped()
        ...  # point the operator's PrometheusSignals at rig.url
        rig.switch("chat-l4-1", "steady")   # recovery
        rig.prometheus.stop()               # "Prometheus down"

Each pod is labelled `namespace`/`pod` in Prometheus, as a PodMonitor's relabelling would; name
the simulated pods after the (KWOK) pods of the pool so the operator's queries find them.

`scraped_pools` keys the fleet by pool instead: one simulated vLLM per pool stands for every
current pod of that pool (`pods_of(pool)`, re-read every second), so a rollout that replaces the
pods (an auto-mode override, its restore) keeps them scraped under their new names:

    with scraped_pools({"NVIDIA-L4": "low-prefix-hit"}, namespace="llm", version="0.11.0",
                       pods_of=lambda pool: [...running pod names...]) as rig:
        rig.wait_scraped()
        rig.switch("NVIDIA-L4", "steady")
"""

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

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


@dataclass
class ScrapedPools:
    """One simulated vLLM per pool, scraped once for each of the pool's current pods."""

    prometheus: LocalPrometheus
    pools: dict[str, SimPod]
    namespace: str
    pods_of: Callable[[str], list[str]]
    current: dict[str, list[str]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.prometheus.url

    def refresh(self) -> dict[str, list[str]]:
        """Re-read each pool's pods; retarget Prometheus when they changed."""
        found = {pool: sorted(self.pods_of(pool)) for pool in self.pools}
        if found != self.current:
            self.current = found
            self.prometheus.set_targets(
                [
                    Target(self.pools[pool].address, {"namespace": self.namespace, "pod": pod})
                    for pool, pods in found.items()
                    for pod in pods
                ]
            )
        return found

    def wait_scraped(self, timeout: float = 30.0) -> None:
        """Until every current pod of every pool has been scraped successfully."""

        def scraped() -> bool:
            pods = {p for names in self.refresh().values() for p in names}
            up = {r["metric"].get("pod") for r in self.prometheus.query('up{job="vllm"} == 1')}
            return bool(pods) and pods <= up

        self.prometheus.wait_until(scraped, timeout, "every pod of the pools scraped")

    def switch(self, pool: str, scenario: str) -> None:
        self.pools[pool].set_scenario(load_scenario(scenario))


@contextmanager
def scraped_pools(
    scenarios: Mapping[str, str],
    *,
    namespace: str,
    version: str,
    pods_of: Callable[[str], list[str]],
    follow_s: float = 1.0,
    scrape_interval: str = "1s",
) -> Iterator[ScrapedPools]:
    """Start one simulated vLLM per pool (pool -> scenario) and a Prometheus that follows the
    pools' pods every `follow_s` seconds.

    Raises e2e.prometheus.PrometheusUnavailable when the binary is not built.
    """
    binary = find_prometheus()
    sims = {
        pool: SimPod(pool, load_scenario(scenario), version=version)
        for pool, scenario in scenarios.items()
    }
    stop = threading.Event()
    with (
        SimFleet(sims.values()),
        LocalPrometheus(binary, [], scrape_interval=scrape_interval) as prom,
    ):
        rig = ScrapedPools(prom, sims, namespace, pods_of)
        rig.refresh()

        def follow() -> None:
            while not stop.wait(follow_s):
                try:
                    rig.refresh()
                except Exception:  # noqa: BLE001 - an API hiccup must not end the follower
                    continue

        thread = threading.Thread(target=follow, name="simvllm-follow", daemon=True)
        thread.start()
        try:
            yield rig
        finally:
            stop.set()
            thread.join(timeout=5)
