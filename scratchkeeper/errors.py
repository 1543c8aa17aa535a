"""One exception root for the whole project; the CLI turns any of them into one line and an exit code."""

from __future__ import annotations


class ScratchkeeperError(Exception):
    """Root of every error scratchkeeper raises on purpose.

    ``exit_code`` is what the CLI exits with: 2 for bad input the user can fix, 1 for a failure
    of the system or of an external tool.
    """

    exit_code = 1


class InputError(ScratchkeeperError):
    """Bad input named by file and line: ``FILE:LINE: message``."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        self.path = path
        self.line = line
        self.message = message
        super().__init__(self._format())

    def _format(self) -> str:
        if self.path is not None and self.line is not None:
            return f"{self.path}:{self.line}: {self.message}"
        if self.path is not None:
            return f"{self.path}: {self.message}"
        return self.message


class DirectiveError(InputError):
    """A malformed #STAGEIN/#STAGEOUT (or #DW, #PBS -W stagein) directive."""


class ConfigError(InputError):
    """The site configuration is invalid: names file, key and what was expected."""


class TemplateError(InputError):
    """A job template could not be rendered (a value it refuses, an undefined value, a broken
    site template): names the template file and line."""


class TraceError(InputError):
    """A corrupt line in a job or failure trace."""


class CommandError(ScratchkeeperError):
    """An external command failed or timed out; carries its argv and stderr."""

    def __init__(self, message: str, *, argv: list[str] | None = None, returncode: int | None = None,
                 stdout: str = "", stderr: str = ""):
        self.argv = argv or []
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        super().__init__(message)


class CommandTimeout(CommandError):
    """An external command ran past its timeout and was killed."""


class SchedulerError(ScratchkeeperError):
    """The batch scheduler refused or failed a request (its own message is kept)."""


class UnknownJobError(SchedulerError):
    """A job id the scheduler (and its accounting) does not know."""

    exit_code = 2


class StateError(ScratchkeeperError):
    """The SQLite state store is unusable (corrupt, newer schema, locked too long)."""


class StorageError(ScratchkeeperError):
    """A storage backend operation failed."""


class TargetUnavailable(StorageError):
    """An OST (storage target) cannot serve the request: failed, unreachable or full."""

    def __init__(self, message: str, *, ost_index: int | None = None, path: str | None = None):
        self.ost_index = ost_index
        self.path = path
        super().__init__(message)


class TransferError(ScratchkeeperError):
    """A data transfer failed; ``permanent`` ones (404, no such file, permission) are not retried."""

    def __init__(self, message: str, *, permanent: bool = False):
        self.permanent = permanent
        super().__init__(message)


class PermissionDenied(ScratchkeeperError):
    """A user asked to act on a file or job they do not own."""

    exit_code = 2


class RecoveryError(ScratchkeeperError):
    """A file could not be recovered from any source."""


class ReplicationError(ScratchkeeperError):
    """A replica could not be created, verified or removed."""


class SolverError(ScratchkeeperError):
    """The replica-selection solver was given an invalid instance or failed."""


class SolverInputError(SolverError, InputError):
    """A malformed solver instance (bucket with no replica, disk id out of range, ...)."""

    exit_code = 2


class QosError(ScratchkeeperError):
    """Read QoS (block designs, placement, admission, retrieval) was given something unusable."""

    exit_code = 2


class DesignError(QosError):
    """A block design fails its check (a pair of devices in no block or in more than one)."""


class PlacementError(ScratchkeeperError):
    """Objects cannot be placed: fewer eligible targets than replicas, or a bad placement map."""


class PlacementInputError(PlacementError, InputError):
    """A malformed placement map or hotness table setting (capacity, bucket, threshold)."""

    exit_code = 2
