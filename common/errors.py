"""The one error type for invalid parameters, so every caller can report it the same way."""


class ParameterError(ValueError):
    """A parameter is outside its valid range; the message names it and the range."""

    def __init__(self, name: str, value: object, valid: str) -> None:
        self.name = name
        self.value = value
        self.valid = valid
        super().__init__(f"{name}={value!r} is invalid: {valid}")
