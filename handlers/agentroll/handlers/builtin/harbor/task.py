"""A Harbor task directory (or a Terminal-Bench 1 one), read and checked.

Harbor (schema 1.x)::

    task.toml            [task] [metadata] [verifier] [agent] [environment]
    instruction.md       what the agent is told
    environment/         build context: Dockerfile (or [environment].docker_image)
    tests/test.sh        the verifier; writes /logs/verifier/reward.json or reward.txt
    solution/solve.sh    optional reference solution (never shown to the agent; the
                         control run when a verifier fails, see `control.py`)

Terminal-Bench 1 (``task.yaml``: ``instruction``, ``max_agent_timeout_sec``,
``max_test_timeout_sec``; ``Dockerfile`` at the top, ``run-tests.sh``, ``tests/``) maps onto the
same model: its environment is the task folder itself, and its verifier runs ``run-tests.sh``
and is graded from pytest's printed summary, as Terminal-Bench 1 graded (see verify.py).

Everything is checked when a job is submitted, so a broken task is a 400, never an
`infra_error` half-way through a rollout.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from agentroll.handlers.errors import TaskFormatError

MAX_INSTRUCTION_BYTES = 1 << 20
MAX_CONFIG_BYTES = 1 << 20
"""task.toml / task.yaml: parsing a huge one (YAML above all) would hold the server up."""
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_WORKDIR = "/app"
TB1_TESTS_SCRIPT = "run-tests.sh"


@dataclass(frozen=True)
class Environment:
    context: Path
    """The image's build context."""
    dockerfile: Path | None
    docker_image: str | None
    """A prebuilt image instead of a Dockerfile."""
    build_timeout_s: float = DEFAULT_TIMEOUT_S
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    network: bool = False
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None


@dataclass(frozen=True)
class HarborTask:
    root: Path
    format: Literal["harbor", "terminal-bench-1"]
    name: str
    instruction: str
    environment: Environment
    tests: Path | None
    """Copied to /tests only when the verifier runs."""
    test_script: Path
    """Copied to /tests too and run there: `tests/test.sh` (Harbor) or `run-tests.sh`
    (Terminal-Bench 1)."""
    solution: Path | None = None
    """The reference solution's script (`solution/solve.sh`; Terminal-Bench 1:
    `solution.sh`), run with its folder in place as the control of a failed verifier."""
    verifier_timeout_s: float = DEFAULT_TIMEOUT_S
    verifier_env: dict[str, str] = field(default_factory=dict)
    agent_timeout_s: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def load_task(root: Path) -> HarborTask:
    """The task in ``root``; `TaskFormatError` saying what is wrong otherwise."""
    if not root.is_dir():
        raise TaskFormatError(f"task folder {root} does not exist")
    if (root / "task.toml").is_file():
        return _harbor(root)
    if (root / "task.yaml").is_file():
        return _terminal_bench_1(root)
    raise TaskFormatError(f"{root} has neither task.toml (Harbor) nor task.yaml (Terminal-Bench 1)")


def _harbor(root: Path) -> HarborTask:
    try:
        config = tomllib.loads(_config_text(root / "task.toml"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TaskFormatError(f"{root}/task.toml: {exc}") from exc
    verifier = _table(config, "verifier")
    agent = _table(config, "agent")
    env = _table(config, "environment")
    context = root / "environment"
    image = _optional_str(env, "docker_image", "environment")
    dockerfile: Path | None = context / "Dockerfile"
    if not (context / "Dockerfile").is_file():
        if image is None:
            raise TaskFormatError(
                f"{root}: no environment/Dockerfile and no [environment].docker_image"
            )
        dockerfile = None
    tests = root / "tests"
    _require_file(tests / "test.sh", root)
    return HarborTask(
        root=root,
        format="harbor",
        name=str(_table(config, "task").get("name") or root.name),
        instruction=_instruction((root / "instruction.md"), root),
        environment=Environment(
            context=context if context.is_dir() else root,
            dockerfile=dockerfile,
            docker_image=image,
            build_timeout_s=_seconds(env, "build_timeout_sec", "environment", DEFAULT_TIMEOUT_S),
            cpus=_positive(env, "cpus", "environment"),
            memory_mb=_int(_positive(env, "memory_mb", "environment")),
            storage_mb=_int(_positive(env, "storage_mb", "environment")),
            network=_network(env),
            env=_str_map(env, "env", "environment"),
            workdir=_optional_path(env, "workdir", "environment"),
        ),
        tests=tests,
        test_script=tests / "test.sh",
        solution=_optional_file(root / "solution" / "solve.sh"),
        verifier_timeout_s=_seconds(verifier, "timeout_sec", "verifier", DEFAULT_TIMEOUT_S),
        verifier_env=_str_map(verifier, "env", "verifier"),
        agent_timeout_s=_seconds(agent, "timeout_sec", "agent", None),
        metadata=_table(config, "metadata"),
    )


def _terminal_bench_1(root: Path) -> HarborTask:
    try:
        config = yaml.safe_load(_config_text(root / "task.yaml"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise TaskFormatError(f"{root}/task.yaml: {exc}") from exc
    if not isinstance(config, dict):
        raise TaskFormatError(f"{root}/task.yaml: expected a mapping")
    instruction = config.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskFormatError(f"{root}/task.yaml: 'instruction' must be a non-empty string")
    _require_file(root / "Dockerfile", root)
    _require_file(root / TB1_TESTS_SCRIPT, root)
    return HarborTask(
        root=root,
        format="terminal-bench-1",
        name=root.name,
        instruction=instruction,
        environment=Environment(context=root, dockerfile=root / "Dockerfile", docker_image=None),
        tests=root / "tests" if (root / "tests").is_dir() else None,
        test_script=root / TB1_TESTS_SCRIPT,
        solution=_optional_file(root / "solution.sh"),
        verifier_timeout_s=_seconds(config, "max_test_timeout_sec", "task.yaml", 180.0),
        agent_timeout_s=_seconds(config, "max_agent_timeout_sec", "task.yaml", None),
        metadata={k: config[k] for k in ("author_email", "difficulty", "category", "tags")
                  if k in config},
    )  # fmt: skip


def _config_text(path: Path) -> str:
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise TaskFormatError(f"{path} is over {MAX_CONFIG_BYTES} bytes")
    return path.read_text()


def _instruction(path: Path, root: Path) -> str:
    _require_file(path, root)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TaskFormatError(f"{path}: {exc}") from exc
    if len(data) > MAX_INSTRUCTION_BYTES:
        raise TaskFormatError(f"{path}: over {MAX_INSTRUCTION_BYTES} bytes")
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        raise TaskFormatError(f"{path} is empty")
    return text


def _optional_file(path: Path) -> Path | None:
    return path if path.is_file() else None


def _require_file(path: Path, root: Path) -> None:
    if not path.is_file():
        raise TaskFormatError(f"{root}: missing {path.relative_to(root)}")


def _table(config: dict[str, Any], name: str) -> dict[str, Any]:
    value = config.get(name, {})
    if not isinstance(value, dict):
        raise TaskFormatError(f"[{name}] must be a table")
    return value


def _number(table: dict[str, Any], key: str, where: str) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TaskFormatError(f"[{where}].{key} must be a number, got {value!r}")
    return float(value)


def _positive(table: dict[str, Any], key: str, where: str) -> float | None:
    value = _number(table, key, where)
    if value is not None and value <= 0:
        raise TaskFormatError(f"[{where}].{key} must be positive, got {value:g}")
    return value


def _seconds(table: dict[str, Any], key: str, where: str, default: float | None) -> Any:
    value = _positive(table, key, where)
    return default if value is None else value


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _optional_str(table: dict[str, Any], key: str, where: str) -> str | None:
    value = table.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TaskFormatError(f"[{where}].{key} must be a string")
    return value


def _optional_path(table: dict[str, Any], key: str, where: str) -> str | None:
    value = _optional_str(table, key, where)
    if value is not None and (not value.startswith("/") or ".." in value.split("/")):
        raise TaskFormatError(f"[{where}].{key} must be an absolute path without '..'")
    return value


def _str_map(table: dict[str, Any], key: str, where: str) -> dict[str, str]:
    value = table.get(key, {})
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str | int | float) for k, v in value.items()
    ):
        raise TaskFormatError(f"[{where}].{key} must map names to strings")
    return {k: str(v) for k, v in value.items()}


def _network(env: dict[str, Any]) -> bool:
    """Harbor's `network_mode` / `allow_internet`: the sandbox gets a network or none."""
    mode = env.get("network_mode")
    if mode is not None and mode not in ("none", "bridge", "host"):
        raise TaskFormatError(f"[environment].network_mode {mode!r}: expected none, bridge, host")
    allow = env.get("allow_internet")
    if allow is not None and not isinstance(allow, bool):
        raise TaskFormatError("[environment].allow_internet must be true or false")
    return bool(allow) or mode in ("bridge", "host")
