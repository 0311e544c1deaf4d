"""The errors a user can fix, each a one-line message that ends with the next step.

The CLI catches :class:`LumenError` in one place and prints it without a traceback (``--debug``
shows one); ``exit_code`` says which of the documented exit codes it maps to.
"""


class LumenError(Exception):
    exit_code = 2

    def __init__(self, message: str, next_step: str = ""):
        super().__init__(message)
        self.message = message
        self.next_step = next_step

    def __str__(self) -> str:
        return f"{self.message}. {self.next_step}" if self.next_step else self.message


class UsageError(LumenError):
    """Wrong arguments or a missing workspace: exit code 2."""

    exit_code = 2


class UnknownExercise(UsageError):
    pass


class WorkspaceNotFound(UsageError):
    pass


class CatalogError(LumenError):
    """The exercise catalogue is broken: the grader cannot run (exit code 3)."""

    exit_code = 3


class SandboxUnavailable(LumenError):
    """The requested sandbox cannot run here (exit code 3)."""

    exit_code = 3


class DeviceUnavailable(LumenError):
    exit_code = 3
