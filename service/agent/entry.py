"""The ``gpu-ledger`` console script: ``gpu-ledger agent --config F`` goes straight to the agent.

The agent runs on every GPU node under a 60 MB memory budget (issue 13); the CLI framework
(typer, click, rich) is ~2–3 MB of it and does nothing for one ``--config`` option. So this entry
hands ``agent`` to :func:`service.agent.run.main` (same option, same one-line errors, exit status
2) and every other command — and ``agent --help`` — to ``service.cli``'s typer app.
"""

from __future__ import annotations

import sys


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["agent"] and not {"-h", "--help"} & set(args[1:]):
        from service.agent.run import main as agent_main

        agent_main(args[1:])
        return
    from service.cli import app

    app()
