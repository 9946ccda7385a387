"""Errors of the planning layer."""


class PlanningInputError(ValueError):
    """Input vLLM itself would reject (a usage error: CLI exit code 2).

    The message names the value and what is accepted instead.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")
