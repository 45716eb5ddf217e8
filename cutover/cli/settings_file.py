"""The router's settings file as every command reads it: loaded, or refused with the sentence
that says how to fix it; a route looked up in it, or refused naming the routes it has."""

from __future__ import annotations

from cutover.cli.errors import CliError
from cutover.settings import RouterSettings, RouteSettings, SettingsError, load_settings


def settings_file(path: str) -> RouterSettings:
    try:
        return load_settings(path)
    except SettingsError as exc:
        raise CliError(f"{exc} (fix the settings file)") from None


def route_in(settings: RouterSettings, name: str, path: str) -> RouteSettings:
    """The route ``name`` of the settings loaded from ``path``."""
    try:
        return settings.route(name)
    except KeyError:
        raise CliError(f"route {name!r} is not in {path}; routes there: "
                       f"{', '.join(r.name for r in settings.routes)}") from None
