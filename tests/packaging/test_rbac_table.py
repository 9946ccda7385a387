"""docs/installation.md's RBAC table is generated from the chart's rules file and in sync with it
(issue #20, defect 12: the hand-written table listed verbs the chart never granted)."""

import importlib.util
import re
from types import ModuleType

import yaml

from tests.packaging.tools import REPO

DOC = REPO / "docs" / "installation.md"
RULES = REPO / "charts" / "vllm-operator" / "files" / "rbac-rules.yaml"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rbac_table", REPO / "hack" / "rbac_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_doc_table_is_the_generated_one() -> None:
    gen = _generator()
    doc = DOC.read_text()
    assert gen.render_doc(doc, RULES.read_text()) == doc, "run 'make generate'"
    assert gen.main(["--check"]) == 0


def test_table_rows_are_exactly_the_granted_verbs() -> None:
    doc = DOC.read_text()
    block = doc[doc.index("rbac-table:begin") : doc.index("rbac-table:end")]
    rows = set()
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):
            group = cells[0].strip("`")
            for api in cells[1].split(", "):
                for res in cells[2].split(", "):
                    for verb in cells[3].split(", "):
                        rows.add((group, "" if api == "core" else api, res, verb))
    rules = yaml.safe_load(RULES.read_text())
    granted = {
        (group, api, res, verb)
        for group, items in rules.items()
        for rule in items
        for api in rule["apiGroups"]
        for res in rule["resources"]
        for verb in rule["verbs"]
    }
    assert rows == granted


def test_a_stale_table_is_detected() -> None:
    gen = _generator()
    doc = DOC.read_text()
    stale = re.sub(r"\| get, list, watch, create, patch, delete \|", "| get, update |", doc)
    assert gen.render_doc(stale, RULES.read_text()) != stale
