"""Errors a user can cause. The CLI prints them in one line and exits 2; nothing else is caught."""


class ServesimError(Exception):
    """Base class for errors caused by user input (bad flag, bad file, impossible configuration)."""


class ConfigError(ServesimError, ValueError):
    """A configuration that cannot work, rejected before simulating (as vLLM validates it)."""


class WorkloadError(ServesimError, ValueError):
    """A workload file or specification that cannot be read. The message names file, line, column, value."""


class EngineOutOfMemory(ServesimError, RuntimeError):
    """A run the engine itself would stop with an out-of-memory error (SGLang's "Prefill out of memory"): the
    configuration's pool cannot hold what its scheduler commits to; the message names the step and the numbers."""


class UnknownRequest(ServesimError, KeyError):
    """A request id that is not in the run (a KeyError too, as a mapping's lookup would raise)."""

    def __str__(self) -> str:  # KeyError's own would quote the whole message
        return str(self.args[0])
