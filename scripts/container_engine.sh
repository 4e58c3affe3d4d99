#!/usr/bin/env bash
# A container engine for the compose test (tests/deploy/test_compose_cluster.py) and for
# anyone on a Debian machine without one:
#   scripts/container_engine.sh install        docker.io + compose (the plugin where the
#                                              distribution has it, else docker-compose)
#                                              + debootstrap, only what is missing
#   scripts/container_engine.sh start DIR      start dockerd if none answers; prints
#                                              "started PID" (DIR/dockerd.pid) or "running"
#   scripts/container_engine.sh stop DIR       stop the dockerd `start DIR` started, if any
#   scripts/container_engine.sh base-image TAG a python3 base image from the distribution's
#                                              packages (debootstrap), for machines that
#                                              cannot pull python:3.11-slim; kept by tag
# Needs root and apt-get (install, start, base-image).
set -euo pipefail
cmd=${1:?install|start|stop|base-image}

need_root() {
    if [[ $(id -u) -ne 0 ]]; then
        echo "container_engine.sh $cmd: needs root" >&2
        exit 1
    fi
}

candidate() {  # the version apt would install, or nothing
    apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}' | grep -v '(none)' || true
}

compose_ok() {
    docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1
}

docker_up() { docker info >/dev/null 2>&1; }

case "$cmd" in
install)
    want=()
    command -v dockerd >/dev/null 2>&1 || want+=(docker.io)
    command -v debootstrap >/dev/null 2>&1 || want+=(debootstrap)
    if ! compose_ok; then
        [[ -n "$(candidate docker-compose-plugin)" ]] && want+=(docker-compose-plugin) \
            || want+=(docker-compose)
    fi
    [[ ${#want[@]} -eq 0 ]] && exit 0
    need_root
    command -v apt-get >/dev/null || { echo "container_engine.sh: no apt-get to install ${want[*]}" >&2; exit 1; }
    export DEBIAN_FRONTEND=noninteractive
    if [[ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]]; then
        apt-get update -qq
    fi
    # a compose package unknown to this distribution: the other one
    if [[ " ${want[*]} " == *" docker-compose "* && -z "$(candidate docker-compose)" ]]; then
        echo "container_engine.sh: neither docker-compose-plugin nor docker-compose is packaged here" >&2
        exit 1
    fi
    apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${want[@]}" >/dev/null
    ;;
start)
    dir=${2:?state directory}
    if docker_up; then
        echo running
        exit 0
    fi
    need_root
    mkdir -p "$dir"
    # vfs: works on any filesystem (overlay on overlay does not); no iptables: a container
    # without NAT rights keeps the host's firewall as it is (builds use the host network)
    setsid dockerd --storage-driver=vfs --iptables=false --pidfile "$dir/dockerd.pid" \
        >"$dir/dockerd.log" 2>&1 < /dev/null &
    pid=$!
    for _ in $(seq 1 600); do
        if docker_up; then
            echo "$pid" > "$dir/started.pid"
            echo "started $pid"
            exit 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "container_engine.sh: dockerd exited; its log:" >&2
            tail -20 "$dir/dockerd.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    echo "container_engine.sh: dockerd did not answer within 60 s; its log $dir/dockerd.log" >&2
    kill "$pid" 2>/dev/null || true
    exit 1
    ;;
stop)
    dir=${2:?state directory}
    [[ -f "$dir/started.pid" ]] || exit 0
    pid=$(cat "$dir/started.pid")
    kill "$pid" 2>/dev/null || { rm -f "$dir/started.pid"; exit 0; }
    for _ in $(seq 1 300); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$dir/started.pid"; exit 0; }
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/started.pid"
    ;;
base-image)
    tag=${2:?image tag}
    if docker image inspect "$tag" >/dev/null 2>&1; then
        exit 0
    fi
    need_root
    command -v debootstrap >/dev/null || { echo "container_engine.sh: run '$0 install' first" >&2; exit 1; }
    suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
    mirror=$(awk '/^deb / && /debian/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    if [[ -z "$mirror" ]]; then
        mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    fi
    root=$(mktemp -d /var/tmp/zpar-base-XXXXXX)
    trap 'rm -rf "$root"' EXIT
    debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates \
        "$suite" "$root" "${mirror:-http://deb.debian.org/debian}" >"$root.log" 2>&1 \
        || { tail -20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
    rm -f "$root.log"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    # the image trusts what this machine trusts: behind a TLS-inspecting proxy, pip in a
    # build reaches PyPI as pip here does
    bundle=/etc/ssl/certs/ca-certificates.crt
    if [[ -f $bundle ]]; then
        mkdir -p "$root/etc/ssl/certs"
        cp "$bundle" "$root$bundle"
    fi
    tar -C "$root" -c . | docker import --change 'CMD ["python3"]' \
        --change "ENV PIP_CERT=$bundle SSL_CERT_FILE=$bundle REQUESTS_CA_BUNDLE=$bundle" \
        - "$tag" >/dev/null
    ;;
*)
    echo "usage: $0 install | start DIR | stop DIR | base-image TAG" >&2
    exit 2
    ;;
esac
