"""Run simulated vLLM pods until interrupted.

    python -m e2e.simvllm --version 0.11.0 --pod chat-l4-0=18001:steady --pod chat-l4-1=18002:kv-saturation

Each --pod is NAME=PORT:SCENARIO (a scenario name from e2e/simvllm/scenarios/ or a YAML path).
"""

import argparse
import signal
import sys
import threading

from e2e.simvllm.scenario import load_scenario
from e2e.simvllm.server import SimFleet, SimPod


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.simvllm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", required=True, help="pinned vLLM version (catalog entry)")
    parser.add_argument("--pod", action="append", required=True, metavar="NAME=PORT:SCENARIO")
    parser.add_argument("--speed", type=float, default=1.0, help="scenario seconds per real second")
    parser.add_argument("--no-dcgm", action="store_true", help="do not expose DCGM_FI_DEV_FB_USED")
    args = parser.parse_args(argv)
    pods = []
    for spec in args.pod:
        try:
            name, rest = spec.split("=", 1)
            port, scenario = rest.split(":", 1)
            pods.append(
                SimPod(
                    name,
                    load_scenario(scenario),
                    version=args.version,
                    port=int(port),
                    speed=args.speed,
                    dcgm=not args.no_dcgm,
                )
            )
        except (ValueError, FileNotFoundError) as err:
            parser.error(f"--pod {spec!r}: {err} (expected NAME=PORT:SCENARIO)")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with SimFleet(pods):
        for pod in pods:
            print(
                f"Serving simulated vLLM pod={pod.name} address={pod.address} scenario={pod.scenario.name}",
                flush=True,
            )
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
