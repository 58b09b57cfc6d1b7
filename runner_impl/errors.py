"""One exception type for bad arguments, so callers (the mrbench CLI) can turn it into
a single error line and exit code 2 without catching unrelated bugs."""


class RunnerError(ValueError):
    """A bad argument, config or model directory. The message names the problem."""


class ModelLoadError(RunnerError):
    """The model directory is missing, incomplete or malformed."""
