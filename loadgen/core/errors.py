"""Errors a user can cause. Each is caught once at the command line: one line, exit 2."""


class StreambenchError(Exception):
    """Base of every user-facing error; the message is the whole line shown to the user."""


class WorkloadError(StreambenchError):
    """A workload file or a workload flag is missing, malformed or out of range."""


class TargetError(StreambenchError):
    """A TARGET argument names an unknown platform or option, or a bad value."""


class NodeLost(Exception):
    """A cluster node's load actor is gone (its node or process lost): the run goes on with the
    other nodes. Never reaches the user as an error."""


class StackError(StreambenchError):
    """A broker could not be started, reached or stopped."""


class DriverError(StreambenchError):
    """A platform client failed in a way the user must act on (unreachable, bad topic)."""


class OutputError(StreambenchError):
    """The run directory or report directory cannot be written."""


class ReportError(StreambenchError):
    """A directory is not a run, a run is empty, or the report job failed."""
