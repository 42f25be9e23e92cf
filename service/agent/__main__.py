"""``python -m service.agent --config F``: the node agent without the CLI framework (see run.main)."""

from service.agent.run import main

main(prog="python -m service.agent")
