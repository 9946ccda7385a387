"""Real vLLM log excerpts from public GitHub issues (tests/remediation/fixtures/logs/*.log).

Each file starts with `# key: value` header lines (source URL, era, the expected diagnosis) and a
`# ---` line; the log follows verbatim. `expect:` lists `class=... phase=... <number>=<value>`.
"""

from dataclasses import dataclass, field
from pathlib import Path

LOGS = Path(__file__).parent / "fixtures" / "logs"


@dataclass(frozen=True)
class LogFixture:
    name: str
    source: str
    log: str
    expect: dict[str, str]
    pod: dict[str, str] = field(default_factory=dict)


def _pairs(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split())


def load(path: Path) -> LogFixture:
    head, log = path.read_text().split("# ---\n", 1)
    meta: dict[str, str] = {}
    for line in head.splitlines():
        key, _, value = line.removeprefix("# ").partition(": ")
        meta[key] = value
    return LogFixture(
        name=path.stem,
        source=meta["source"],
        log=log,
        expect=_pairs(meta["expect"]),
        pod=_pairs(meta["pod"].split(" (")[0]) if "pod" in meta else {},
    )


def all_fixtures() -> list[LogFixture]:
    return [load(p) for p in sorted(LOGS.glob("*.log"))]
