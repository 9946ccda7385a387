"""vllm-operator: serve vLLM with engine limits computed from the model and the GPU."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("vllm-operator")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
