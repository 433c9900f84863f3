"""Push a trainer's new weights into running vLLM engines (docs/protocol.md §7.5).

vLLM 0.32's CPU build has no transport the trainer can stream tensors through: its weight
transfer API (`/init_weight_transfer_engine` ... `/finish_weight_update`) only has NCCL and
CUDA-IPC backends. What it does have, in dev mode (`VLLM_SERVER_DEV_MODE=1`), is
`/collective_rpc` with the worker's `reload_weights(weights_path=...)`: the engine reloads
its weights in place from a safetensors directory. So a push is

    save the state dict as safetensors (in /dev/shm where there is one: no disk round trip)
    -> POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": dir}}
    -> POST /reset_prefix_cache   (cached KV was computed by the old weights)
    -> POST /update_weight_version {"new_version": str(policy_version)}

The engine must see the directory, i.e. run on the same host (or share the filesystem).

`update_policy` wraps it in agentroll's barrier: pause the agentroll server, push to every
engine, resume with the new `policy_version`. torch and safetensors are imported only when a
state dict is saved: the rest of trainer_clients imports without them.
"""

import contextlib
import dataclasses
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from agentroll.server.schema import PauseMode
from agentroll.trainer_clients.errors import WeightPushError

if TYPE_CHECKING:
    import torch

    from agentroll.trainer_clients.client import RolloutClient

WEIGHTS_FILE = "model.safetensors"
TIED_EMBEDDINGS, TIED_HEAD = "model.embed_tokens.weight", "lm_head.weight"
SHARED_MEMORY = Path("/dev/shm")


@dataclass(frozen=True)
class WeightPush:
    """One engine's weight update: what it now serves and what each step cost."""

    engine_url: str
    weight_version: str
    """What the engine's `/weight_info` reports after the push."""
    save_s: float
    """Writing the state dict (0 when a saved directory was pushed)."""
    load_s: float
    """The engine's in-place reload."""
    prefix_cache_reset: bool
    """False when the engine kept its prefix cache (it refuses while requests hold blocks,
    e.g. ones parked by a `keep` pause): later prompts may reuse KV of the old weights."""


def save_weights(state_dict: "Mapping[str, torch.Tensor]", directory: str | Path) -> Path:
    """Write `state_dict` (Hugging Face parameter names) as `directory/model.safetensors`.

    Tensors are copied to CPU and made contiguous; tensors that share storage (tied
    embeddings) are written once each under every name, since the engine's loader decides
    which of the tied names it reads."""
    import torch
    from safetensors.torch import save_file

    seen: set[tuple[int, int]] = set()
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        cpu = tensor.detach().to("cpu").contiguous()
        key = (cpu.untyped_storage().data_ptr(), int(cpu.storage_offset()))
        tensors[name] = cpu.clone() if key in seen else cpu
        seen.add(key)
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / WEIGHTS_FILE))
    return path


def _answer(url: str, call: Callable[[], httpx.Response]) -> Any:
    try:
        response = call()
    except httpx.HTTPError as exc:
        raise WeightPushError(url, None, f"{type(exc).__name__}: {exc}") from exc
    if response.status_code == 404:
        raise WeightPushError(
            url, 404, "not served: start vLLM with VLLM_SERVER_DEV_MODE=1 for its RL endpoints"
        )
    if response.status_code != 200:
        raise WeightPushError(url, response.status_code, response.text[:500])
    return response.json() if response.content else None


@contextlib.contextmanager
def _scratch_dir() -> Iterator[Path]:
    """A temporary directory, in shared memory where there is one; removed on exit."""
    parent = SHARED_MEMORY if SHARED_MEMORY.is_dir() else None
    scratch = Path(tempfile.mkdtemp(prefix="agentroll-weights-", dir=parent))
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _scratch_copy(state_dict: "Mapping[str, torch.Tensor]") -> Iterator[tuple[Path, float]]:
    """The state dict saved in a scratch directory, with the seconds the save took."""
    began = time.perf_counter()
    with _scratch_dir() as scratch:
        save_weights(state_dict, scratch)
        yield scratch, time.perf_counter() - began


@contextlib.contextmanager
def _with_tied_head(directory: Path) -> Iterator[Path]:
    """`directory`, or a scratch view of it that also names the tied output head.

    vLLM 0.32 reloads in place only the tensors a checkpoint names, and ties nothing again
    afterwards: a tied-embeddings model saved by `save_pretrained` has no `lm_head.weight`,
    so the engine would sample through the new embeddings and the OLD head. The view links
    the directory's files and adds the head as a copy of the embeddings."""
    config_file = directory / "config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    files = sorted(directory.glob("*.safetensors"))
    if not config.get("tie_word_embeddings"):
        yield directory
        return
    from safetensors import safe_open
    from safetensors.torch import save_file

    holder: dict[str, Path] = {}
    for file in files:
        with safe_open(str(file), "pt") as weights:
            holder.update(dict.fromkeys(weights.keys(), file))
    if TIED_HEAD in holder or TIED_EMBEDDINGS not in holder:
        yield directory
        return
    with _scratch_dir() as view:
        for file in files:
            (view / file.name).symlink_to(file.resolve())
        with safe_open(str(holder[TIED_EMBEDDINGS]), "pt") as weights:
            head = weights.get_tensor(TIED_EMBEDDINGS)
        save_file({TIED_HEAD: head}, str(view / "tied-head.safetensors"))
        yield view


def push_weights(
    engine_url: str,
    weight_version: str | int,
    *,
    state_dict: "Mapping[str, torch.Tensor] | None" = None,
    directory: str | Path | None = None,
    timeout_s: float = 300.0,
    api_key: str | None = None,
) -> WeightPush:
    """Load new weights into the vLLM engine at `engine_url` and label them `weight_version`.

    Pass either `state_dict` (saved to a temporary directory, in shared memory where there
    is one, removed after the load) or `directory` (safetensors already saved, e.g. by
    `save_pretrained`; left in place). `WeightPushError` if the engine refuses any step or
    reports another version afterwards.

    vLLM 0.32 reloads in place and does not survive a checkpoint it cannot load (missing
    files are refused here; wrong names or shapes stop the engine: restart it)."""
    if (state_dict is None) == (directory is None):
        raise ValueError("pass exactly one of state_dict and directory")
    if state_dict is not None:
        with _scratch_copy(state_dict) as (scratch, save_s):
            push = push_weights(
                engine_url, weight_version, directory=scratch, timeout_s=timeout_s, api_key=api_key
            )
        return dataclasses.replace(push, save_s=save_s)
    assert directory is not None
    if not any(Path(directory).glob("*.safetensors")):
        # checked here: vLLM 0.32's engine dies on a reload that finds no weights
        raise ValueError(f"no *.safetensors file in {directory}: nothing to push")
    with _with_tied_head(Path(directory)) as loadable:
        return _reload(engine_url, str(weight_version), loadable, timeout_s, api_key)


def _reload(
    engine_url: str, weight_version: str, directory: Path, timeout_s: float, api_key: str | None
) -> WeightPush:
    base = engine_url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    reload = {
        "method": "reload_weights",
        "kwargs": {"weights_path": str(directory.resolve())},
        "timeout": timeout_s,
    }
    with httpx.Client(base_url=base, timeout=timeout_s, headers=headers) as http:
        began = time.perf_counter()
        _answer(base + "/collective_rpc", lambda: http.post("/collective_rpc", json=reload))
        load_s = time.perf_counter() - began
        reset = _answer(base + "/reset_prefix_cache", lambda: http.post("/reset_prefix_cache"))
        version = {"new_version": weight_version}
        _answer(
            base + "/update_weight_version",
            lambda: http.post("/update_weight_version", json=version),
        )
        served = _answer(base + "/weight_info", lambda: http.get("/weight_info"))
    served_version = (served or {}).get("weight_version")
    if served_version != weight_version:
        raise WeightPushError(
            base, 200, f"engine reports weight version {served_version!r} after the push"
        )
    return WeightPush(base, served_version, 0.0, load_s, bool((reset or {}).get("success")))


def update_policy(
    client: "RolloutClient",
    engine_urls: Sequence[str],
    policy_version: int,
    *,
    state_dict: "Mapping[str, torch.Tensor] | None" = None,
    directory: str | Path | None = None,
    mode: PauseMode = "wait",
    policy: str | None = None,
    pause_timeout_s: float = 120.0,
    push_timeout_s: float = 300.0,
) -> list[WeightPush]:
    """Pause agentroll (`mode`), push the weights to every engine as `policy_version`, then
    resume with that version, so every token sampled after this returns is stamped with it.

    A push that fails leaves the server paused and raises: resuming would stamp the new
    version on tokens of the old weights. Retry the call (pausing again is harmless)."""
    if state_dict is not None:
        with _scratch_copy(state_dict) as (scratch, _):
            return update_policy(
                client,
                engine_urls,
                policy_version,
                directory=scratch,
                mode=mode,
                policy=policy,
                pause_timeout_s=pause_timeout_s,
                push_timeout_s=push_timeout_s,
            )
    client.pause(mode, pause_timeout_s, policy=policy)
    pushes = [
        push_weights(url, policy_version, directory=directory, timeout_s=push_timeout_s)
        for url in engine_urls
    ]
    client.resume(policy_version, policy=policy)
    return pushes
