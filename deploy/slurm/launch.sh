#!/usr/bin/env bash
# Wait for the rollout servers and the vLLM servers, register every vLLM server with every
# rollout server, and print the rollout server list for the trainer.
#
#   deploy/slurm/launch.sh ROLLOUT_LIST EXPECTED_ROLLOUT VLLM_LIST EXPECTED_VLLM
#   deploy/slurm/launch.sh ROLLOUT_LIST EXPECTED_ROLLOUT --backend http://gpu1:8001 [...]
#
# Environment: AGENTROLL_API_TOKEN (sent as a bearer token; required when the servers listen
# beyond loopback) or, for servers on this machine, AGENTROLL_TOKEN_FILE (the file the servers
# generated their token in), SERVED_MODEL_NAME (default policy), LAUNCH_TIMEOUT_S (default
# 1800: vLLM loading a large model takes a while).
set -euo pipefail

die() { echo "launch: $*" >&2; exit 1; }
(( $# >= 3 )) || die "usage: $0 ROLLOUT_LIST N (VLLM_LIST M | --backend URL...)"
ROLLOUT_LIST="$1"; N_ROLLOUT="$2"; shift 2
TIMEOUT_S="${LAUNCH_TIMEOUT_S:-1800}"
MODEL_NAME="${SERVED_MODEL_NAME:-policy}"
deadline=$(( SECONDS + TIMEOUT_S ))

urls_in() { [[ -f "$1" ]] && grep -Ev '^\s*(#|$)' "$1" | sort -u || true; }

wait_for_list() {   # wait_for_list FILE COUNT PATH-TO-PROBE
    local file="$1" want="$2" probe="$3" have url ready
    while :; do
        have="$(urls_in "$file" | wc -l)"
        if (( have >= want )); then
            ready=0
            for url in $(urls_in "$file"); do
                curl -fsS -o /dev/null "$url$probe" && ready=$((ready + 1))  # probes: no token
            done
            (( ready >= want )) && return 0
        fi
        (( SECONDS < deadline )) || die "$file: $have of $want servers ready after ${TIMEOUT_S}s"
        sleep 1
    done
}

BACKENDS=()
if [[ "$1" == "--backend" ]]; then
    shift; BACKENDS=("$@")
    (( ${#BACKENDS[@]} )) || die "--backend needs at least one URL"
else
    VLLM_LIST="$1"; N_VLLM="$2"
    wait_for_list "$VLLM_LIST" "$N_VLLM" /health
    mapfile -t BACKENDS < <(urls_in "$VLLM_LIST")
fi
wait_for_list "$ROLLOUT_LIST" "$N_ROLLOUT" /readyz

# Read once the servers are up: a server without a configured token has written its own by now.
TOKEN="${AGENTROLL_API_TOKEN:-}"
if [[ -z "$TOKEN" && -n "${AGENTROLL_TOKEN_FILE:-}" ]]; then
    TOKEN="$(tr -d '[:space:]' < "$AGENTROLL_TOKEN_FILE")" || die "cannot read $AGENTROLL_TOKEN_FILE"
fi
[[ -n "$TOKEN" ]] || die "no token: set AGENTROLL_API_TOKEN (or AGENTROLL_TOKEN_FILE)"
AUTH=(-H "Authorization: Bearer $TOKEN")

for server in $(urls_in "$ROLLOUT_LIST"); do
    i=0
    for backend in "${BACKENDS[@]}"; do
        body="{\"id\": \"vllm-$i\", \"kind\": \"vllm\", \"base_url\": \"$backend\", \"model\": \"$MODEL_NAME\"}"
        curl -fsS -o /dev/null "${AUTH[@]}" -H 'Content-Type: application/json' \
            -d "$body" "$server/v1/backends" || die "registering $backend with $server failed"
        i=$((i + 1))
    done
done
echo "registered ${#BACKENDS[@]} backend(s) with $(urls_in "$ROLLOUT_LIST" | wc -l) rollout server(s)"
echo "rollout servers (give this file to the trainer: ServerPool(\"$ROLLOUT_LIST\")):"
urls_in "$ROLLOUT_LIST"
