"""servesim: trace, simulate and explain how an LLM serving engine schedules work."""

from servesim.config import EngineConfig
from servesim.engine import simulate
from servesim.request import Request, RequestStatus
from servesim.run import Run

__all__ = ["EngineConfig", "Request", "RequestStatus", "Run", "__version__", "simulate"]
__version__ = "0.1.0"
