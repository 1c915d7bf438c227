"""The reports' jinja2 environment (harness/templates): HTML templates autoescaped, an undefined
name an error rather than an empty cell, `url` and `md` filters for links and table cells."""
from urllib.parse import quote

import jinja2


def templates_environment() -> jinja2.Environment:
    environment = jinja2.Environment(loader=jinja2.PackageLoader("harness", "templates"),
                                     autoescape=lambda name: bool(name) and name.endswith(".html.j2"),
                                     trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                                     undefined=jinja2.StrictUndefined)
    environment.filters["url"] = lambda path: quote(path)
    environment.filters["md"] = lambda text: str(text).replace("|", "\\|").replace("\n", " ")
    return environment
