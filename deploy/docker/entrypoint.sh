#!/bin/sh
# The image's entrypoint. `serve` and `demo` listen on $HOST:$PORT (default 0.0.0.0:8000, the
# port the HEALTHCHECK asks); anything else is passed to gpu-ledger as it is:
#   docker run IMAGE                      gpu-ledger serve --host 0.0.0.0 --port $PORT
#   docker run IMAGE serve --workers 2    the same, plus the arguments given
#   docker run IMAGE demo                 serve --demo: the synthetic fleet (see the Dockerfile on auth)
#   docker run IMAGE migrate | tokens create --name N --scope read | agent --config F | …
# A later --host/--port on the command line wins (the last occurrence of an option counts).
set -eu
cmd="${1:-serve}"
[ "$#" -gt 0 ] && shift
case "$cmd" in
    serve) exec gpu-ledger serve --host "${HOST:-0.0.0.0}" --port "${PORT:-8000}" "$@" ;;
    demo) exec gpu-ledger serve --host "${HOST:-0.0.0.0}" --port "${PORT:-8000}" --demo "$@" ;;
    *) exec gpu-ledger "$cmd" "$@" ;;
esac
