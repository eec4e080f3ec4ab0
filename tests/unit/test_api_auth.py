"""Who may call the API: the token's sources, the bind rule without a token, the header check."""

from __future__ import annotations

from pathlib import Path

import pytest

from smartsensor.api.auth import bind_host, configured_token, is_loopback, token_matches
from smartsensor.config import ConfigError
from tests.support.common import make_cfg


def cfg(tmp_path: Path, **overrides: str):
    return make_cfg(tmp_path, f"sqlite:///{tmp_path / 'unused.db'}", **overrides)


def test_no_token_configured_means_none(tmp_path: Path) -> None:
    assert configured_token(cfg(tmp_path)) is None
    assert configured_token(cfg(tmp_path, api__token="  ")) is None


def test_the_token_file_wins_over_the_token(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("from-file\nignored second line\n")
    assert configured_token(cfg(tmp_path, api__token="inline", api__token_file=str(secret))) == "from-file"
    assert configured_token(cfg(tmp_path, api__token="inline")) == "inline"


@pytest.mark.parametrize("content, why", [(None, "cannot be read"), ("", "is empty"), ("\n\n", "is empty")])
def test_a_token_file_that_gives_no_token_is_a_clear_error(tmp_path: Path, content: str | None, why: str) -> None:
    secret = tmp_path / "token"
    if content is not None:
        secret.write_text(content)
    with pytest.raises(ConfigError, match=why):
        configured_token(cfg(tmp_path, api__token_file=str(secret)))


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.1.2.3", False),
        ("::", False),
        ("example.com", False),
        ("", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_without_a_token_only_loopback_is_served_and_the_narrowing_is_said() -> None:
    assert bind_host("0.0.0.0", None) == ("127.0.0.1", bind_host("0.0.0.0", None)[1])
    assert "no API token configured" in bind_host("0.0.0.0", None)[1]
    assert bind_host("::1", None) == ("::1", None)
    assert bind_host("0.0.0.0", "s3cret") == ("0.0.0.0", None)


@pytest.mark.parametrize(
    "header, ok",
    [
        ("Bearer s3cret", True),
        ("bearer s3cret", True),
        ("Bearer  s3cret ", True),
        ("Bearer s3cre", False),
        ("Bearer s3cret2", False),
        ("Basic s3cret", False),
        ("s3cret", False),
        ("", False),
        (None, False),
        ("Bearer", False),
        ("Bearer é\x00", False),
    ],
)
def test_the_header_must_carry_exactly_the_token(header: str | None, ok: bool) -> None:
    assert token_matches(header, "s3cret") is ok


def test_the_login_cookie_is_signed_expires_and_dies_with_the_token() -> None:
    from smartsensor.api.auth import SESSION_SECONDS, session_valid, session_value

    value = session_value("tok", now=1_000_000)
    assert "tok" not in value and session_valid(value, "tok", now=1_000_000 + 60)
    assert not session_valid(value, "tok", now=1_000_000 + SESSION_SECONDS + 1)  # expired
    assert not session_valid(value, "tok", now=1_000_000 - 60)  # issued in the future
    assert not session_valid(value, "rotated", now=1_000_000 + 60)  # a new token ends every session
    issued, _, signature = value.partition(".")
    assert not session_valid(f"{int(issued) + 3600}.{signature}", "tok", now=1_000_000 + 3600)  # extended by hand
    for forged in (None, "", "tok", ".", "1.", "x.y", "9" * 40 + ".ab", value + "0"):
        assert not session_valid(forged, "tok", now=1_000_000 + 60)
