#!/usr/bin/env bash
# Installs the Debian packages agentroll's sandboxes use, only when they are missing.
# bubblewrap: the rootless sandbox runtime used on workstations and in CI.
set -euo pipefail
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
# util-linux (nsenter, prlimit): exec into sandboxes and apply their resource limits.
# mmdebstrap: builds root-filesystem images for bubblewrap sandboxes (agentroll build-image).
command -v nsenter >/dev/null 2>&1 && command -v prlimit >/dev/null 2>&1 || missing+=(util-linux)
# slirp4netns + iproute2: sandboxes with network get their own namespace behind user-mode NAT.
command -v slirp4netns >/dev/null 2>&1 || missing+=(slirp4netns)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
# buildah + umoci: build task images from Dockerfiles rootless (build_task_image, build-image --tag).
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
command -v umoci >/dev/null 2>&1 || missing+=(umoci)
# npm: the agent-cli image fetches the coding-agent CLIs and Node from the npm registry on the host.
command -v npm >/dev/null 2>&1 || missing+=(npm)
# slurm-wlm + munge: the deployment test runs a real single-node Slurm controller and daemon.
command -v slurmctld >/dev/null 2>&1 || missing+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || missing+=(munge)
# chromium + chromium-driver: the rollout viewer's browser tests drive headless Chromium.
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "agentroll: please install: ${missing[*]} (needs root)" >&2; exit 1; fi
else SUDO=""; fi
echo "agentroll: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
