"""The one exception type every interface turns into a one-line message and a non-zero exit."""


class GpuplanError(ValueError):
    """A user-facing error: bad input, an unknown name, a config that cannot be understood.

    The message is a single line meant to be printed as-is (CLI) or returned as a 4xx body (web).
    """
