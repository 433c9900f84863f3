"""One home per setting: every command reads the cache folders from `CacheSettings`.

`agentroll build-image` once ignored `AGENTROLL_IMAGES_DIR` (the server and `harbor-image`
read it), so the documented base-image command put bases where the server did not look.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentroll.handlers.builtin.harbor import source
from agentroll.handlers.builtin.swe import swe_mirror
from agentroll.runtime.settings import CacheSettings, cache_settings
from agentroll.server import engine
from agentroll.server.cli import build_parser


def test_build_image_and_harbor_image_write_where_the_server_looks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AGENTROLL_IMAGES_DIR", str(tmp_path / "images"))
    parser = build_parser()
    built = parser.parse_args(["build-image", "python-base"])
    prebuilt = parser.parse_args(["harbor-image", "hello-file"])
    assert built.output_dir == tmp_path / "images"
    assert prebuilt.images_dir == tmp_path / "images"
    assert source.cache_dir() == tmp_path / "images"  # what a harbor rollout in the server uses


def test_an_explicit_flag_still_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTROLL_IMAGES_DIR", str(tmp_path / "images"))
    args = build_parser().parse_args(["build-image", "x", "--output-dir", str(tmp_path / "o")])
    assert args.output_dir == tmp_path / "o"


def test_help_names_the_variable_and_the_folder_in_use(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTROLL_IMAGES_DIR", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "1000")  # argparse would wrap the path at its hyphens
    with pytest.raises(SystemExit):
        build_parser().parse_args(["build-image", "--help"])
    help_text = capsys.readouterr().out
    assert f"$AGENTROLL_IMAGES_DIR or {tmp_path}" in help_text


@pytest.mark.parametrize(
    ("field", "reader"),
    [
        ("images_dir", source.cache_dir),
        ("swe_mirrors", swe_mirror.cache_dir),
        ("engine_cache", engine.cache_root),
    ],
)
def test_each_folder_has_one_variable_and_one_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, field: str, reader: object
) -> None:
    assert callable(reader)
    name = CacheSettings.env_name(field)
    monkeypatch.setenv(name, str(tmp_path))
    assert reader() == getattr(cache_settings(), field) == tmp_path
    monkeypatch.setenv(name, "")  # a launcher passing on an unset variable: the default
    default = CacheSettings.model_fields[field].default.expanduser()
    assert reader() == default and "~" not in str(default)


def test_an_unknown_setting_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="images_dir"):
        CacheSettings.env_name("image_dir")
