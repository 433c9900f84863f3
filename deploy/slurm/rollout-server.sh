#!/usr/bin/env bash
# One agentroll rollout server: run by `srun` once per task of rollout-servers.sbatch.
#
# Starts `agentroll serve` on a node-local database, waits until it answers /readyz, then
# appends its URL to the shared server list ($AGENTROLL_SERVER_LIST, one URL per line) that
# the launcher and the trainer read. On SIGTERM (scancel, time limit) the server drains for
# its shutdown grace, cancels and persists the rest, and tears its sandboxes down.
set -euo pipefail

: "${AGENTROLL_SERVER_LIST:?set AGENTROLL_SERVER_LIST to a file on the shared filesystem}"
BIN="${AGENTROLL_BIN:-agentroll}"
# Beyond loopback AGENTROLL_API_TOKEN is required (the trainer, on another node, must hold it);
# on loopback without it, the server generates a token in $STATE/api-token (or
# $AGENTROLL_TOKEN_FILE) that clients on this node read.
HOST="${AGENTROLL_HOST:-0.0.0.0}"
PORT="${AGENTROLL_PORT:-0}"                  # 0: any free port (the list records the real one)
ADVERTISE="${AGENTROLL_ADVERTISE_HOST:-$( [[ $HOST == 127.0.0.1 ]] && echo 127.0.0.1 || hostname -f )}"
TASK="${SLURM_JOB_ID:-local}.${SLURM_PROCID:-0}"
STATE="${AGENTROLL_STATE:-${TMPDIR:-/tmp}/agentroll}/$TASK"   # node-local scratch, not Lustre
READY_TIMEOUT_S="${AGENTROLL_READY_TIMEOUT_S:-120}"

mkdir -p "$STATE"
CMD=("$BIN" serve --host "$HOST" --port "$PORT" --db "$STATE/agentroll.db" --url-file "$STATE/url")
if [[ -n "${AGENTROLL_APPTAINER_IMAGE:-}" ]]; then
    # --cleanenv keeps SLURM_* and the login environment out of the container; pass what
    # agentroll needs explicitly. Bind the node-local state dir (the db and sandboxes live there).
    CMD=(apptainer exec --cleanenv --bind "$STATE" \
         --env "AGENTROLL_API_TOKEN=${AGENTROLL_API_TOKEN:-}" \
         --env "AGENTROLL_POOLS__RUN=${AGENTROLL_POOLS__RUN:-256}" \
         "$AGENTROLL_APPTAINER_IMAGE" "${CMD[@]}")
fi

"${CMD[@]}" >>"$STATE/server.log" 2>&1 &
SERVER_PID=$!
echo "$SERVER_PID" > "$STATE/server.pid"
echo "$$" > "$STATE/task.pid"
trap 'kill -TERM "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID"; exit 0' TERM INT

deadline=$(( SECONDS + READY_TIMEOUT_S ))
until [[ -s "$STATE/url" ]] && curl -fsS -o /dev/null "$(cat "$STATE/url")/healthz"; do
    kill -0 "$SERVER_PID" 2>/dev/null || { tail -n 30 "$STATE/server.log" >&2; exit 1; }
    (( SECONDS < deadline )) || { echo "server not up after ${READY_TIMEOUT_S}s" >&2; exit 1; }
    sleep 0.2
done
PORT_BOUND="$(sed -E 's#.*:([0-9]+)/?$#\1#' "$STATE/url")"
URL="http://$ADVERTISE:$PORT_BOUND"
until curl -fsS -o /dev/null "$URL/readyz"; do   # /healthz and /readyz need no token
    (( SECONDS < deadline )) || { echo "$URL not ready after ${READY_TIMEOUT_S}s" >&2; exit 1; }
    sleep 0.2
done
# One line per server; flock keeps concurrent tasks from interleaving their writes.
mkdir -p "$(dirname "$AGENTROLL_SERVER_LIST")"
( flock 9; echo "$URL" >> "$AGENTROLL_SERVER_LIST" ) 9>>"$AGENTROLL_SERVER_LIST.lock"
echo "agentroll server $TASK ready at $URL (state $STATE)"
wait "$SERVER_PID"
