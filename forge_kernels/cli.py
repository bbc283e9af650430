"""The ``forge-kernels`` command.

    forge-kernels eval-server --host 127.0.0.1 --port 8700 --devices 0,1   # or --devices cpu
    forge-kernels worker --address tcp://127.0.0.1:26600                   # a host agent
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pydantic import ValidationError

__all__ = ["main"]


def _eval_server_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("eval-server", help="serve kernel evaluation over HTTP (see docs/service.md)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    p.add_argument("--port", type=int, default=8700, help="0 picks a free port (printed on start)")
    p.add_argument("--devices", default="cpu", help="'cpu' or GPU indices '0,1': one worker per GPU")
    p.add_argument("--cpu-workers", type=int, default=1, help="workers when --devices cpu")
    p.add_argument("--concurrency", type=int, default=None, help="evaluations per worker at once")
    p.add_argument("--queue-limit", type=int, default=1024, help="waiting evaluations before 429")
    p.add_argument("--max-code-bytes", type=int, default=256_000)
    p.add_argument("--max-batch", type=int, default=256)
    p.add_argument("--cache-entries", type=int, default=4096)
    p.add_argument("--eval-deadline-s", type=float, default=None,
                   help="service-side limit per evaluation (default options.timeout_s + 240)")
    p.add_argument("--token", default=None, help="require 'Authorization: Bearer <token>'")
    p.add_argument("--allow-remote-without-token", action="store_true",
                   help="allow a non-loopback --host with no token")
    p.add_argument("--timing-lock-dir", default=None, help="directory of the per-GPU timing lock files")
    p.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    p.add_argument("--ready-file", default=None, help="write the server's URL here once it listens")


def _worker_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("worker", help="run a Monarch host agent that a controller places actors on")
    p.add_argument("--address", default="tcp://127.0.0.1:26600", help="tcp://HOST:PORT to listen on")
    p.add_argument("--bind-any", action="store_true",
                   help="allow a non-loopback --address (the agent runs whatever a controller sends)")


def _worker(address: str, bind_any: bool) -> int:
    from forge_kernels.runtime.hosts import check_bind_allowed, parse_host

    try:
        host = parse_host(address)
        check_bind_allowed(host, bind_any)
    except ValueError as err:
        print(f"forge-kernels worker: {err}", file=sys.stderr)
        return 2
    from monarch.actor import run_worker_loop_forever

    print(f"forge-kernels worker: listening on {host}", flush=True)
    run_worker_loop_forever(address=str(host), ca="trust_all_connections")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``forge-kernels``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="forge-kernels", description="Forge Kernels command line")
    sub = parser.add_subparsers(dest="command", required=True)
    _eval_server_parser(sub)
    _worker_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "worker":
        return _worker(args.address, args.bind_any)
    if args.command == "eval-server":
        from forge_kernels.eval.service.models import ServerConfig
        from forge_kernels.eval.service.server import check_bind_allowed, serve

        fields = {k: v for k, v in vars(args).items() if k not in ("command", "ready_file") and v is not None}
        try:
            config = ServerConfig(**fields)
            check_bind_allowed(config)
        except (ValidationError, ValueError) as err:
            print(f"forge-kernels eval-server: {err}", file=sys.stderr)
            return 2
        serve(config, ready_file=args.ready_file)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
