"""`agentroll prime-env-server`: prime-rl's env-server protocol (`server.PrimeEnvServer`).

Its ZMQ and msgpack are imported only when the server starts (`pip install
'agentroll[prime]'`), so the command line lists it without them.
"""

import argparse
import asyncio

from agentroll.server.front_guard import ALLOW_FLAG, require_loopback, zmq_host


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", required=True, help="the agentroll server's URL")
    parser.add_argument("--token-file", help="its API token (default: as clients find it)")
    parser.add_argument("--handler", required=True, help="the handler every task runs under")
    parser.add_argument("--address", default="tcp://127.0.0.1:5000", help="ZMQ bind address")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per rollout")
    parser.add_argument("--env-id", default="agentroll", help="the episodes' env id")
    parser.add_argument(
        ALLOW_FLAG, action="store_true", help="listen beyond loopback (no authentication)"
    )


def run_cli(args: argparse.Namespace) -> int:
    from agentroll.server.prime_env.server import PrimeEnvServer
    from agentroll.trainer_clients import AsyncRolloutClient

    require_loopback(zmq_host(args.address), args.allow_remote, "prime-env-server")

    async def main() -> None:
        client = AsyncRolloutClient(args.server, token_file=args.token_file)
        server = PrimeEnvServer(
            client,
            handler=args.handler,
            address=args.address,
            timeout_s=args.timeout,
            env_id=args.env_id,
        )
        print(f"agentroll prime-rl env server on {server.address}", flush=True)
        try:
            await server.serve()
        finally:
            await client.close()

    asyncio.run(main())
    return 0
