"""The container image and explicit command for a pinned vLLM version.

Why explicit: the official image's ENTRYPOINT changed from the api_server module to
``vllm serve`` at an unpinned point, so the operator always sets ``command`` itself.
"""

from pydantic import BaseModel, ConfigDict

from vllm_operator.catalog.vllm.loader import load_version


class ContainerCommand(BaseModel):
    """``command`` and the leading ``args`` (the model) of the vLLM container."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str
    command: tuple[str, ...]
    model_args: tuple[str, ...]


def image_for(version: str, override: str | None = None) -> str:
    """``vllm/vllm-openai:v<version>`` unless spec.vllm.image overrides it."""
    return override or load_version(version).image


def container_command(version: str, model: str, image: str | None = None) -> ContainerCommand:
    """``vllm serve MODEL`` where the release has the ``vllm`` CLI, else the api_server module."""
    catalog = load_version(version)
    model_args = (model,) if catalog.model_arg == "positional" else ("--model", model)
    return ContainerCommand(
        image=image_for(version, image), command=catalog.command, model_args=model_args
    )
