#!/usr/bin/env bash
# Install the system packages zpar's launcher tests need, only those missing:
#   mpi   -> mpiexec (MPICH)            ssh -> sshd + ssh client (OpenSSH)
#   slurm -> slurmctld + slurmd         compose -> docker-compose (for `config` only)
#   chromium -> a headless browser (the dashboard's tests drive it over DevTools)
# Usage: scripts/ensure_system_packages.sh mpi ssh ...   (needs root and Debian's apt)
set -euo pipefail
declare -A probe=( [mpi]=mpiexec [ssh]=/usr/sbin/sshd [slurm]=slurmctld [compose]=docker-compose [chromium]=chromium )
declare -A pkgs=( [mpi]="mpich" [ssh]="openssh-server openssh-client" [slurm]="slurmctld slurmd slurm-client munge" [compose]="docker-compose" [chromium]="chromium" )
want=()
for what in "$@"; do
    [[ -n "${probe[$what]:-}" ]] || { echo "ensure_system_packages: unknown item '$what'" >&2; exit 2; }
    if ! command -v "${probe[$what]}" >/dev/null 2>&1 && [[ ! -x "${probe[$what]}" ]]; then
        want+=( ${pkgs[$what]} )
    fi
done
[[ ${#want[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "ensure_system_packages: need root and apt-get to install: ${want[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# one update per machine: apt's lists older than a day are refreshed
if [[ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]]; then
    apt-get update -qq
fi
apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
