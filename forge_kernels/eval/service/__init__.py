"""The eval service: kernel evaluation over HTTP, for training, apps and outside tools.

    forge-kernels eval-server --devices 0,1            # or: python -m forge_kernels.eval.service

    async with EvalClient(["http://127.0.0.1:8700"]) as client:
        result = await client.evaluate(task, code, EvalOptions())

    with LocalEvalServer(devices="cpu") as server:      # a server subprocess for this app
        ...server.url...

See ``docs/service.md``. The ``EvalWorker`` actor (``forge_kernels.eval.service.actor``) runs the
same scheduler inside the actor runtime, for a Service of eval replicas on Monarch.
"""

from forge_kernels.eval.service.client import EvalClient
from forge_kernels.eval.service.errors import EvalRequestError, EvalServiceUnavailable
from forge_kernels.eval.service.launch import LocalEvalServer
from forge_kernels.eval.service.models import (
    BatchRequest,
    BatchResponse,
    EvalRequest,
    EvalResponse,
    HealthResponse,
    ServerConfig,
    WorkerInfo,
)

__all__ = [
    "BatchRequest",
    "BatchResponse",
    "EvalClient",
    "EvalRequest",
    "EvalRequestError",
    "EvalResponse",
    "EvalServiceUnavailable",
    "HealthResponse",
    "LocalEvalServer",
    "ServerConfig",
    "WorkerInfo",
]
