"""servesim: trace, simulate and explain how an LLM serving engine schedules work."""

from servesim.config import EngineConfig
from servesim.request import Request, RequestStatus

__all__ = ["EngineConfig", "Request", "RequestStatus", "__version__"]
__version__ = "0.1.0"
