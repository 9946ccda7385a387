"""The Dockerfile's invariants, checked by parsing it (there is no Docker engine in CI): pinned base,
multi-stage with nothing but the virtual environment carried over, non-root numeric USER, no
secrets, `vllm-operator run` as entrypoint, OCI labels; and a build context of only what it needs."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field

from tests.packaging.tools import REPO

DOCKERFILE = REPO / "Dockerfile"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
SECRETISH = re.compile(r"(TOKEN|SECRET|PASSW|API_?KEY|CREDENTIAL|PRIVATE)", re.IGNORECASE)
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|make|build-essential|clang|cargo|rustc|git|curl|wget)\b")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [a for k, a in self.instructions if k == keyword]


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        keyword, _, rest = buf.partition(" ")
        out.append((keyword.upper(), rest.strip()))
        buf = ""
    return out


def parse() -> tuple[dict[str, str], list[Stage]]:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for keyword, rest in instructions(DOCKERFILE.read_text()):
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            global_args[name] = default
        elif keyword == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: global_args[m.group(1)], parts[0])
            alias = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base, alias))
        else:
            stages[-1].instructions.append((keyword, rest))
    return global_args, stages


def test_every_base_is_pinned_by_digest() -> None:
    _, stages = parse()
    for stage in stages:
        assert DIGEST.search(stage.base), f"unpinned base {stage.base}"
        assert stage.base.startswith("python:3.11-slim")


def test_multi_stage_final_image_carries_only_the_venv() -> None:
    _, stages = parse()
    assert len(stages) >= 2
    build, final = stages[0], stages[-1]
    assert build.name == "build"
    copies = final.args("COPY")
    assert copies == ["--from=build /opt/vllm-operator /opt/vllm-operator"]
    for run in final.args("RUN"):
        assert not BUILD_TOOLS.search(run), run
        assert "apt-get install" not in run and "pip install" not in run
    for run in build.args("RUN"):
        assert "apt-get" not in run, "wheels only: the build stage needs no system packages"


def test_runs_as_non_root_numeric_user() -> None:
    _, stages = parse()
    users = stages[-1].args("USER")
    assert users, "the final stage must set USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) == 65532
    assert gid == "" or (gid.isdigit() and int(gid) != 0)
    # nothing after USER switches back to root
    keywords = [k for k, _ in stages[-1].instructions]
    assert "RUN" not in keywords[keywords.index("USER") :]


def test_no_secrets_in_env_args_or_labels() -> None:
    global_args, stages = parse()
    names = list(global_args)
    for stage in stages:
        for keyword, rest in stage.instructions:
            if keyword in {"ENV", "ARG"}:
                names += [tok.split("=", 1)[0] for tok in shlex.split(rest)]
            assert "--mount=type=secret" not in rest
    assert not [n for n in names if SECRETISH.search(n)], names
    text = DOCKERFILE.read_text()
    assert not re.search(r"hf_[A-Za-z0-9]{20,}", text)


def test_entrypoint_is_vllm_operator_run() -> None:
    _, stages = parse()
    final = stages[-1]
    assert json.loads(final.args("ENTRYPOINT")[-1]) == ["vllm-operator"]
    assert json.loads(final.args("CMD")[-1]) == ["run"]


def test_oci_labels() -> None:
    _, stages = parse()
    labels = " ".join(stages[-1].args("LABEL"))
    found = dict(tok.split("=", 1) for tok in shlex.split(labels))
    for key in ("title", "description", "source", "licenses", "version", "revision", "created"):
        assert found.get(f"org.opencontainers.image.{key}"), key
    assert found["org.opencontainers.image.licenses"] == "Apache-2.0"


def test_build_context_is_an_allow_list() -> None:
    lines = [
        ln.strip()
        for ln in (REPO / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    assert allowed == {"pyproject.toml", "requirements.lock", "README.md", "operator"}
    # what the build stage copies is exactly what the context allows
    _, stages = parse()
    copied = {src for c in stages[0].args("COPY") for src in c.split()[:-1]}
    assert copied == allowed


LOCK = REPO / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\$")


def _locked() -> dict[str, tuple[str, int]]:
    """name -> (version, number of sha256 hashes), from requirements.lock."""
    out: dict[str, tuple[str, int]] = {}
    name = None
    for line in LOCK.read_text().splitlines():
        match = PIN.match(line)
        if match:
            name = match.group(1).lower().replace("_", "-")
            out[name] = (match.group(2), 0)
        elif name and line.strip().startswith("--hash=sha256:"):
            version, hashes = out[name]
            out[name] = (version, hashes + 1)
    return out


def test_image_installs_from_the_hashed_lock_file() -> None:
    """Issue #20 (defect 11): the image installed unpinned dependency ranges."""
    _, stages = parse()
    build = stages[0]
    runs = build.args("RUN")
    locked_install = [r for r in runs if "-r requirements.lock" in r]
    assert locked_install and "--require-hashes" in locked_install[0]
    assert "--no-deps" in locked_install[0]
    project = [
        r for r in runs if "pip install" in r and "." in r.split() and r not in locked_install
    ]
    assert project, "the project itself is installed after the lock"
    for flag in ("--no-deps", "--no-index", "--no-build-isolation"):
        assert flag in project[0], flag
    copies = build.args("COPY")
    assert copies.index("requirements.lock ./") < next(
        i for i, c in enumerate(copies) if c.startswith("operator")
    )


def test_lock_pins_every_dependency_with_hashes() -> None:
    from packaging.requirements import Requirement

    locked = _locked()
    assert locked, "requirements.lock is empty"
    unhashed = [n for n, (_, hashes) in locked.items() if hashes == 0]
    assert not unhashed, unhashed
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    wanted = [Requirement(r) for r in pyproject["project"]["dependencies"]]
    wanted += [Requirement(r) for r in pyproject["build-system"]["requires"]]
    for req in wanted:
        name = req.name.lower().replace("_", "-")
        assert name in locked, f"{name} is not in requirements.lock: run 'make lock'"
        version = locked[name][0]
        assert req.specifier.contains(version, prereleases=True), (
            f"{name}=={version} violates {req.specifier}: run 'make lock'"
        )
