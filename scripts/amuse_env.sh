#!/usr/bin/env bash
# Build AMUSE's framework (amuse-framework, whose sockets channel needs no MPI) into a
# throwaway virtualenv for the typed-call interop tests, installing gfortran and g++ from the
# system packages if they are absent (AMUSE's build wants a Fortran compiler; the tests
# compile a C++ community-code worker with AMUSE's own code generator, amusifier).
# AMUSE 2024.6.0 builds from source only, with an old toolchain.
#   scripts/amuse_env.sh DIR   -> prints the venv's python (reused if DIR already holds one)
# Exit codes: 2 usage, 3 no compiler and none can be installed, 4 venv, 5 toolchain, 6 AMUSE.
set -euo pipefail
dir=${1:?usage: $0 DIR}
AMUSE_VERSION=${AMUSE_VERSION:-2024.6.0}
py=${AMUSE_PYTHON:-python3}
venv="$dir/venv"
log="$dir/build.log"

mkdir -p "$dir"
if [ -f "$venv/.amuse-$AMUSE_VERSION" ]; then
    echo "$venv/bin/python"
    exit 0
fi

if ! command -v gfortran >/dev/null || ! command -v g++ >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gfortran g++) \
            >"$dir/apt.log" 2>&1 || { tail -20 "$dir/apt.log" >&2; exit 3; }
    else
        echo "gfortran/g++ are not installed and cannot be installed here (needs root and apt-get)" >&2
        exit 3
    fi
fi

rm -rf "$venv"
"$py" -m venv "$venv" >"$log" 2>&1 || { tail -20 "$log" >&2; exit 4; }
pip="$venv/bin/pip"
# the build imports these itself (--no-build-isolation): the versions AMUSE 2024.6 knew
"$pip" install -q "setuptools==69.5.1" "setuptools_scm<9" "numpy<2" wheel docutils \
    >>"$log" 2>&1 || { tail -20 "$log" >&2; exit 5; }
"$pip" install -q --no-build-isolation --no-deps "amuse-framework==$AMUSE_VERSION" \
    >>"$log" 2>&1 || { tail -40 "$log" >&2; exit 6; }
touch "$venv/.amuse-$AMUSE_VERSION"
echo "$venv/bin/python"
