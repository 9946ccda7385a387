"""The small, cached virtual environment in which vLLM's parser is executed.

Why a separate venv: it must contain vLLM's real pure-Python dependencies at pinned versions
(requirements-parser.txt) and nothing else, so that the stand-ins in vllm_introspect.py are used
exactly for what is absent -- independent of the operator's own environment.

Location: ``$VLLM_OPERATOR_CACHE_DIR/parser-venv`` (default ``~/.cache/vllm-operator``); rebuilt when
requirements-parser.txt changes (a stamp holds its sha256).  Setup takes ~10 s with a warm pip.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements-parser.txt"

sys.path.insert(0, str(HERE))
import fetch  # noqa: E402


def venv_dir() -> Path:
    return fetch.cache_root() / "parser-venv"


def ensure() -> Path:
    """Return the venv's python, creating or refreshing the venv if needed."""
    venv = venv_dir()
    py = venv / "bin" / "python"
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    stamp = venv / ".requirements.sha256"
    if py.is_file() and stamp.is_file() and stamp.read_text().strip() == want:
        return py
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "-r",
            str(REQUIREMENTS),
        ],
        check=True,
    )
    stamp.write_text(want + "\n")
    return py


if __name__ == "__main__":
    print(ensure())
