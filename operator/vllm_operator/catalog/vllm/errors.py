"""Typed errors of the vLLM version catalog: what was wrong, with which flag and value."""

from pydantic import BaseModel, ConfigDict


class Problem(BaseModel):
    """One rejected flag or value; ``message`` is a full sentence a user can act on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flag: str
    value: str | None = None
    message: str


class ArgsError(ValueError):
    """An argv or set of engine args that the pinned vLLM version would reject.

    Carries every problem found (not only the first), so a user fixes them in one round.
    """

    def __init__(self, version: str, problems: list[Problem]) -> None:
        self.version = version
        self.problems = list(problems)
        super().__init__(
            f"{len(self.problems)} problem(s) for vLLM {version}: "
            + "; ".join(p.message for p in self.problems)
        )


class UnknownVersionError(ValueError):
    """A vLLM version that the catalog holds no data for."""

    def __init__(self, version: str, supported: list[str]) -> None:
        self.version = version
        self.supported = list(supported)
        super().__init__(
            f"vLLM version {version!r} is not in the version catalog; supported: "
            f"{supported[0]} to {supported[-1]} ({', '.join(supported)})"
        )
