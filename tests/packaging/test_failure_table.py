"""docs/operations.md lists every reason the operator reports, with what the user should do."""

import re
from pathlib import Path

from vllm_operator.api.reasons import Reason

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _section() -> str:
    text = DOC.read_text()
    start = text.index("## Every failure the operator reports")
    return text[start : text.index("\n## ", start + 1)]


def test_every_reason_is_in_the_failure_table_or_listed_as_healthy() -> None:
    section = _section()
    table = {m for m in re.findall(r"^\| [^|]+ \| `([A-Za-z]+)` \|", section, re.M)}
    healthy_text = section[section.index("Healthy reasons") :]
    healthy = set(re.findall(r"`([A-Za-z]+)`", healthy_text))
    missing = {r.value for r in Reason} - table - healthy
    assert not missing, f"add these reasons to docs/operations.md: {sorted(missing)}"
    unknown = (table | healthy) - {r.value for r in Reason}
    assert not unknown, f"not members of Reason: {sorted(unknown)}"
    assert not table & healthy


def test_every_failure_row_says_what_to_do() -> None:
    rows = [line for line in _section().splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) > 20
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 4 and all(cells), row
