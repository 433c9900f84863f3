from pathlib import Path

import pytest

from agentroll.server.settings import Settings, UnsafeSettingsError, load_settings


def test_defaults_bind_loopback() -> None:
    s = Settings()
    assert s.host == "127.0.0.1" and s.api_token is None


def test_refuses_public_address_without_token() -> None:
    with pytest.raises(ValueError, match="without an api_token") as info:
        Settings(host="0.0.0.0")
    assert isinstance(info.value.errors()[0]["ctx"]["error"], UnsafeSettingsError)  # type: ignore[attr-defined]
    assert Settings(host="0.0.0.0", api_token="s3cret").host == "0.0.0.0"


def test_precedence_flags_over_env_over_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "agentroll.toml"
    config.write_text('port = 9000\ndb_path = "/tmp/x.db"\n[pools]\nrun = 64\ninit = 8\n')
    monkeypatch.setenv("AGENTROLL_PORT", "9100")
    monkeypatch.setenv("AGENTROLL_POOLS__INIT", "4")
    s = load_settings(config)
    assert s.port == 9100  # env beats file
    assert s.pools.run == 64 and s.pools.init == 4
    assert str(s.db_path) == "/tmp/x.db"
    assert load_settings(config, port=9200).port == 9200  # flag beats env


def test_missing_config_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="config file not found"):
        load_settings(tmp_path / "absent.toml")


def test_unknown_setting_is_rejected(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("prot = 1\n")
    with pytest.raises(ValueError, match="prot"):
        load_settings(config)


def test_llm_proxy_caps_are_settings_within_the_proxys_own_ceiling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTROLL_LLM_PROXY__REQUESTS_PER_S", "2.5")
    caps = Settings().llm_proxy
    assert caps.requests_per_s == 2.5 and caps.request_burst == 30  # the rest: defaults
    with pytest.raises(ValueError, match="max_body_bytes"):
        Settings(llm_proxy={"max_body_bytes": 64 * 1024 * 1024})  # over the 32 MiB ceiling
