"""The Airflow test deployment's own command lines (scripts/airflow/stack.py) survive every password it draws: a
random one starting with ``-`` failed `airflow users create` with exit 2 (CI, 2026-11-28, 13 errors)."""

from __future__ import annotations

import argparse

import pytest

from scripts.airflow.stack import admin_user_args


def users_create_parser() -> argparse.ArgumentParser:
    """The options of Airflow's ``users create`` that our call gives, parsed as Airflow's CLI parses them (argparse)."""
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("command", nargs=2)
    for option in ("--username", "--password", "--role", "--email", "--firstname", "--lastname"):
        parser.add_argument(option)
    return parser


@pytest.mark.parametrize("password", ["-P0Et81stutfscRm", "--x", "plain_Pw-9", "-"])
def test_a_password_starting_with_a_dash_is_the_passwords_value(password: str) -> None:
    parsed = users_create_parser().parse_args(admin_user_args(password))
    assert parsed.command == ["users", "create"] and parsed.password == password and parsed.role == "Admin"


def test_the_old_spelling_fails_as_airflow_did() -> None:
    """Why the ``--password=`` form: a separate word starting with ``-`` is an option to argparse."""
    with pytest.raises((argparse.ArgumentError, SystemExit)):
        users_create_parser().parse_args(["users", "create", "--password", "-P0Et81stutfscRm"])
