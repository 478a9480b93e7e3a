"""CLI commands, one module per command, discovered by ``planner.cli``.

Each module defines:

* ``NAME``: the subcommand (``python -m planner NAME``);
* ``HELP``: one line for ``--help``;
* ``add_arguments(parser)``: its flags (``--format`` is added for it);
* ``run(args)``: the result, a pydantic model, dict or list, JSON-able; it calls the core and
  does no arithmetic of its own;
* optionally ``render_table(result) -> str``: the human-readable view (default: a generic one).

Modules whose name starts with ``_`` and ``common`` (shared flags and rendering) are not commands.
Add a command by dropping a module here; nothing else needs to change.
"""
