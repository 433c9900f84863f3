"""The generated API token: private, complete when visible, reused, never where sandboxes look;
and how a client finds it."""

import os
import stat
import sys
import threading
from pathlib import Path

import httpx
import pytest

from agentroll.server import auth
from agentroll.server.auth import api_tokens, load_or_create_token
from agentroll.server.schema.auth import API_TOKEN_ENV, TOKEN_FILE_ENV
from agentroll.server.settings import Settings, UnsafeSettingsError
from agentroll.trainer_clients import RolloutClient
from agentroll.trainer_clients.auth import resolve_token


@pytest.fixture(autouse=True)
def _no_token_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_TOKEN_ENV, raising=False)
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)


def test_without_a_configured_token_one_is_generated_private_beside_the_store(
    tmp_path: Path,
) -> None:
    old = os.umask(0)  # the most permissive umask must not widen the file
    try:
        tokens = api_tokens(Settings(db_path=tmp_path / "state" / "agentroll.db"))
    finally:
        os.umask(old)
    path = tmp_path / "state" / "api-token"
    st = path.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700  # created private too
    assert path.read_text().strip() == tokens.api and len(tokens.api) >= 40
    assert os.listdir(tmp_path / "state") == ["api-token"]  # no staging file left behind


def test_the_token_is_reused_across_restarts_and_differs_per_state_dir(tmp_path: Path) -> None:
    first = api_tokens(Settings(db_path=tmp_path / "a" / "agentroll.db")).api
    assert api_tokens(Settings(db_path=tmp_path / "a" / "agentroll.db")).api == first
    assert api_tokens(Settings(db_path=tmp_path / "b" / "agentroll.db")).api != first
    # A configured token is used as is and written nowhere.
    assert api_tokens(Settings(db_path=tmp_path / "c" / "x.db", api_token="mine")).api == "mine"
    assert not (tmp_path / "c" / "api-token").exists()


def test_the_file_appears_complete_and_private_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a reader could see the moment the name exists: the staged file, already whole."""
    seen: list[tuple[int, str]] = []
    real_link = os.link

    def watching_link(src: str | Path, dst: str | Path) -> None:
        seen.append((stat.S_IMODE(os.stat(src).st_mode), Path(src).read_text()))
        real_link(src, dst)

    monkeypatch.setattr(auth.os, "link", watching_link)
    token = load_or_create_token(tmp_path / "api-token")
    assert seen == [(0o600, f"{token}\n")]


def test_servers_starting_together_agree_on_one_token(tmp_path: Path) -> None:
    path = tmp_path / "api-token"
    found: list[str] = []
    start = threading.Barrier(8)

    def one() -> None:
        start.wait()
        found.append(load_or_create_token(path))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(found) == 8 and len(set(found)) == 1
    assert path.read_text().strip() == found[0]
    assert os.listdir(tmp_path) == ["api-token"]


def test_a_token_file_others_could_read_or_a_link_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "api-token"
    path.write_text("leaked-token\n")
    path.chmod(0o644)
    with pytest.raises(UnsafeSettingsError, match="may have leaked"):
        load_or_create_token(path)
    path.chmod(0o600)
    assert load_or_create_token(path) == "leaked-token"  # an operator's own, kept private
    link = tmp_path / "link-token"
    link.symlink_to(path)
    with pytest.raises(UnsafeSettingsError, match="symbolic link"):
        load_or_create_token(link)
    empty = tmp_path / "empty-token"
    empty.touch(mode=0o600)
    with pytest.raises(ValueError, match="does not hold a bearer token"):
        load_or_create_token(empty)


@pytest.mark.parametrize(
    "where",
    [
        Path(sys.prefix) / "agentroll-state",  # the interpreter's tree: bound into sandboxes
        Path("/etc/agentroll-state"),  # a system directory: bound into sandboxes
    ],
)
def test_a_token_file_where_host_root_sandboxes_see_it_is_refused(where: Path) -> None:
    with pytest.raises(UnsafeSettingsError, match="sandboxes see"):
        api_tokens(Settings(db_path=where / "agentroll.db"))
    assert not where.exists()  # refused before anything was written


def test_a_client_reads_the_token_of_a_server_on_this_machine_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    token = api_tokens(Settings()).api  # the default store, var/agentroll.db
    assert Path("var/api-token").is_file()
    for local in ("http://127.0.0.1:8700", "http://localhost:8700", "http://[::1]:8700"):
        assert resolve_token(local) == token, local
    # A server elsewhere never receives this machine's token.
    assert resolve_token("http://rollout-node:8700") is None
    assert resolve_token("http://10.0.0.7:8700") is None
    # Named sources come first: the argument, then the environment.
    assert resolve_token("http://rollout-node:8700", token_file="var/api-token") == token
    monkeypatch.setenv(API_TOKEN_ENV, "from-env")
    assert resolve_token("http://127.0.0.1:8700") == "from-env"
    assert resolve_token("http://127.0.0.1:8700", token="given") == "given"
    monkeypatch.delenv(API_TOKEN_ENV)
    other = tmp_path / "other-token"
    other.write_text("other\n")
    monkeypatch.setenv(TOKEN_FILE_ENV, str(other))
    assert resolve_token("http://rollout-node:8700") == "other"


def test_a_client_made_before_its_server_finds_the_token_once_written(tmp_path: Path) -> None:
    sent: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("authorization"))
        return httpx.Response(200, json=[])

    path = tmp_path / "api-token"
    transport = httpx.MockTransport(answer)
    with RolloutClient("http://127.0.0.1:1", token_file=path, transport=transport) as client:
        assert client.backends() == []
        token = load_or_create_token(path)  # the server starts now
        assert client.backends() == [] and client.backends() == []
    assert sent == [None, f"Bearer {token}", f"Bearer {token}"]


def test_a_blank_token_from_the_environment_is_no_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A launcher passing on an unset variable (`--env AGENTROLL_API_TOKEN=`) must not open
    the server to anyone who sends an empty bearer."""
    monkeypatch.setenv(API_TOKEN_ENV, "")
    monkeypatch.setenv("AGENTROLL_ADMIN_TOKEN", "  ")
    with pytest.raises(ValueError, match="without an api_token"):
        Settings(host="0.0.0.0")
    settings = Settings(db_path=tmp_path / "agentroll.db")
    assert settings.api_token is None and settings.admin_token is None
    assert api_tokens(settings).api == (tmp_path / "api-token").read_text().strip()
