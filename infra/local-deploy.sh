#!/usr/bin/env bash
# Register prefect.yaml's deployments on a running server (`vlmforge server`), run the sample-release one and
# serve it with `vlmforge worker` (Ctrl-C stops it and cancels the runs it executes). From the repository root:
#
#   bash infra/local-deploy.sh                 # PREFECT_API_URL defaults to http://127.0.0.1:4200/api
#   bash infra/local-deploy.sh --no-run        # register and serve only
#
# The worker's flow runs start a loopback Ray each, or use RAY_ADDRESS when set (`vlmforge server --ray`).
set -euo pipefail
cd "$(dirname "$0")/.."
py="${VLMFORGE_PYTHON:-.venv/bin/python}"
export PREFECT_API_URL="${PREFECT_API_URL:-http://127.0.0.1:4200/api}"
export VLMFORGE_HOME="$PWD" PREFECT_SERVER_ANALYTICS_ENABLED=false RAY_USAGE_STATS_ENABLED=0
prefect=("$py" -m prefect --no-prompt)

"$py" -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1] + '/health', timeout=5)" \
  "$PREFECT_API_URL" || { echo "no Prefect server at $PREFECT_API_URL: start \`vlmforge server\` first" >&2; exit 1; }
"${prefect[@]}" work-pool inspect vlmforge-local >/dev/null 2>&1 \
  || "${prefect[@]}" work-pool create vlmforge-local --type process
"${prefect[@]}" deploy --all
if [[ "${1:-}" != "--no-run" ]]; then
  [[ -d sample-release ]] || "$py" -m vlmforge.flows.cli sample-release sample-release
  "${prefect[@]}" deployment run vlmforge-run/sample-release
fi
echo "UI: ${PREFECT_API_URL%/api}  (the run appears under Flow Runs)"
exec "$py" -m vlmforge.flows.cli worker --pool vlmforge-local  # one Ctrl-C cancels its runs (README)
