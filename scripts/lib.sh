# Shared set-up logic for scripts/test and scripts/demo (and bench/). Source it; don't run it.
#
# Every step checks first and does nothing when the thing is already there, so a second
# run of scripts/test or scripts/demo costs seconds, not minutes.

CLSHIM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The Debian packages the tests, the demo and the benchmark need.
CLSHIM_APT_PACKAGES=(
    pocl-opencl-icd      # the OpenCL CPU driver clshim is about
    ocl-icd-libopencl1   # the system OpenCL loader (libOpenCL.so.1)
    ocl-icd-opencl-dev   # libOpenCL.so for linking the C tests
    opencl-c-headers     # CL/cl.h for the C tests
    clinfo               # handy for checking the driver is seen
    mpich                # mpiexec for the multi-rank benchmark and tests
    build-essential      # cc for the C tests
    python3-venv         # venv for Debian's python3 (harmless with pyenv's)
    valgrind             # memcheck run of a C test program under the shim
    strace               # counts the file operations of a binary query on the native store
    hashcat              # a real client: dlopens the loader, compile + link, on-disk kernel cache
    libclblast-dev       # a real client: CLBlast, in-memory binary cache
    libclfft-dev         # a real client: clFFT, on-disk binary cache (CLFFT_CACHE_PATH)
    libboost-dev         # a real client: Boost.Compute (header-only), offline binary cache
    libboost-filesystem-dev  # ... which that cache needs
    sshfs                # the simulated hosts' shared home (tests/common/hosts.rs); brings fuse3
    openssh-server       # ... served by an sshd of the test's own on 127.0.0.1 (the package's
                         #     own service is not used, nor its configuration)
    openssh-client       # ... ssh, which sshfs runs, and ssh-keygen for the test's keys
    lmod                 # the modules tool EasyBuild installs clshim under (tests/clients/install.rs);
                         #     Debian's environment-modules conflicts with it: see
                         #     ensure_environment_modules
    tcl                  # tclsh, which runs Environment Modules' modulecmd.tcl
)

# Requirement strings of the Python environments under .venv/.
# current: the newest pyopencl (skips its binary cache on pocl since 2024.2.3).
# old:     pyopencl 2023.1, the last release line that still caches binaries on pocl
#          (the slow path clshim fixes); numpy<2 because its wheels were built against
#          numpy 1, and pytools<2024 because newer pytools warns on stderr at every run
#          of pyopencl 2023.1 (safe_sync), which would hide the warnings that matter.
CLSHIM_VENV_REQS_current="pyopencl numpy pytest"
CLSHIM_VENV_REQS_old="pyopencl==2023.1 numpy<2 pytools<2024"
# wheelbuild: the tools that build and check the clshim wheel (tests/clients/wheel.rs builds it
#          with `pip wheel --no-build-isolation` here, so a test run downloads nothing):
#          maturin (the build backend), ziglang (links against glibc 2.17 for the
#          manylinux tag), auditwheel (checks the tag).
CLSHIM_VENV_REQS_wheelbuild="maturin>=1.9,<2 ziglang auditwheel"
# intel:   the Khronos ICD loader (lib/libOpenCL.so.1, with layer support) and Intel's CPU
#          OpenCL runtime (lib/libintelocl.so), from Intel's PyPI wheels; the second
#          package brings the libraries the runtime links (libsvml.so and friends). About
#          225 MB, downloaded once. No pyopencl here: its wheels bundle ocl-icd and cannot
#          use this loader, so the Khronos tests drive C clients.
CLSHIM_VENV_REQS_intel="intel-opencl-rt intel-cmplr-lib-rt"
# macos:   zig, only for the macOS libSystem symbol list (.tbd) it ships, which
#          scripts/check-macos needs to link libclshim.dylib on Linux.
CLSHIM_VENV_REQS_macos="ziglang"
# easybuild: EasyBuild (the framework and its stock easyblocks, pinned: the easyconfig uses
#          the Cargo easyblock), which tests/clients/install.rs runs to install clshim from
#          its release tarball. EasyBuild ships source distributions only.
CLSHIM_VENV_REQS_easybuild="easybuild-framework==5.4.1 easybuild-easyblocks==5.4.1"
CLSHIM_VENV_CHECK_easybuild='import easybuild.main, easybuild.easyblocks.generic.cargo'
CLSHIM_VENV_SOURCES_OK_easybuild=1
CLSHIM_VENV_CHECK_macos='import ziglang'
CLSHIM_VENV_CHECK_intel='import os, sys; assert all(os.path.isfile(os.path.join(sys.prefix, "lib", f)) for f in ("libOpenCL.so.1", "libintelocl.so"))'
# CLSHIM_VENV_CHECK_<name>: the Python that proves a venv complete (default: it imports
# pyopencl and numpy). CLSHIM_VENV_SOURCES_OK_<name>=1: its packages may be built from
# source distributions (default: wheels only).
CLSHIM_VENV_CHECK_wheelbuild='import maturin, ziglang, auditwheel'

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Installs whatever of CLSHIM_APT_PACKAGES (plus any extra names given) is missing.
# apt runs only when something is missing; as root directly, else through sudo if present.
ensure_system_packages() {
    local missing=() p
    for p in "${CLSHIM_APT_PACKAGES[@]}" "$@"; do
        # (dpkg -s alone also succeeds for a removed package whose config files remain)
        dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing+=("$p")
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        log "system packages: all present"
        return 0
    fi
    log "system packages missing: ${missing[*]}"
    local SUDO=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 \
            || die "not root and no sudo: install these Debian packages first: ${missing[*]}"
        SUDO=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -q || die "apt-get update failed"
    "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" \
        || die "apt-get install failed for: ${missing[*]}"
}

ensure_cargo() {
    if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    command -v cargo >/dev/null 2>&1 || die "cargo not found: install a Rust toolchain (rustup) first"
}

# The minimum Rust version Cargo.toml declares (`rust-version`).
clshim_rust_version() {
    sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$CLSHIM_ROOT/Cargo.toml" | head -n 1
}

# check_rust_version: checks every target with the declared minimum Rust version and the
# committed lock file (`cargo +VERSION check --all-targets --locked`, into target/msrv so
# the main build is left alone), installing that toolchain with rustup when it is missing.
check_rust_version() {
    local version; version="$(clshim_rust_version)"
    [ -n "$version" ] || die "Cargo.toml declares no rust-version"
    command -v rustup >/dev/null 2>&1 \
        || die "rustup not found: it installs Rust $version, the declared minimum, for its check"
    if ! rustup run "$version" cargo --version >/dev/null 2>&1; then
        log "rust $version: installing (rustup, minimal profile)"
        rustup toolchain install "$version" --profile minimal \
            || die "rustup could not install Rust $version"
    fi
    log "cargo +$version check --all-targets --locked (the declared minimum Rust version)"
    (cd "$CLSHIM_ROOT" && CARGO_TARGET_DIR=target/msrv cargo "+$version" check --all-targets --locked --quiet)
}

# The Python used to create the environments: $PYTHON, else python3.
clshim_base_python() {
    local py="${PYTHON:-python3}"
    command -v "$py" >/dev/null 2>&1 || die "$py not found (set PYTHON to a Python 3 interpreter)"
    printf '%s' "$py"
}

# ensure_venv NAME: creates .venv/NAME with CLSHIM_VENV_REQS_NAME unless its stamp file
# already records the same requirement string, base Python version and folder (a venv's
# scripts name its Python by the absolute path it was made at, so one made through another
# path, or moved, has broken commands and is made again). A half-made or
# stale environment is removed and made again. CLSHIM_VENV_CHECK_NAME, when set, is the
# Python statement that proves the environment usable (default: importing pyopencl, numpy).
ensure_venv() {
    local name="$1" reqs_var="CLSHIM_VENV_REQS_$1"
    local reqs="${!reqs_var}"
    local check_var="CLSHIM_VENV_CHECK_$1"
    local check="${!check_var:-import pyopencl, numpy}"
    local sources_var="CLSHIM_VENV_SOURCES_OK_$1" only_binary=":all:"
    if [ "${!sources_var:-0}" = 1 ]; then only_binary=":none:"; fi
    [ -n "$reqs" ] || die "unknown venv '$name'"
    # The real path: worktrees that link .venv to one folder share its environments, and
    # their stamps must agree, or each worktree's run would make them again.
    local dir stamp
    dir="$(realpath -m "$CLSHIM_ROOT/.venv/$name")"
    stamp="$dir/clshim-stamp"
    local base; base="$(clshim_base_python)"
    local want; want="$reqs | $("$base" -c 'import sys; print(sys.version.split()[0])') | $dir"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$dir/bin/python" -c "$check" 2>/dev/null; then
        log "venv $name: up to date ($reqs)"
        return 0
    fi
    log "venv $name: creating with $reqs"
    rm -rf "$dir"
    mkdir -p "$CLSHIM_ROOT/.venv"
    "$base" -m venv "$dir" || die "could not create $dir (python3 -m venv)"
    # shellcheck disable=SC2086 # the requirement string is a word list on purpose
    "$dir/bin/python" -m pip install -q --only-binary="$only_binary" $reqs \
        || { rm -rf "$dir"; die "pip install failed in venv $name ($reqs)"; }
    printf '%s\n' "$want" > "$stamp"
}

# ensure_pyopencl_tests: pyopencl's own test files (test/*.py and the files they read),
# for the pyopencl in .venv/current, from its source distribution on PyPI (found through
# the simple index, so no build backend runs), in .venv/pyopencl-tests/ with a stamp
# naming the version. The program cache's tests run them with and without clshim.
ensure_pyopencl_tests() {
    local py="$CLSHIM_ROOT/.venv/current/bin/python" dir="$CLSHIM_ROOT/.venv/pyopencl-tests"
    local version; version="$("$py" -c 'import pyopencl; print(pyopencl.VERSION_TEXT)')"
    if [ -f "$dir/clshim-stamp" ] && [ "$(cat "$dir/clshim-stamp")" = "$version" ] \
        && [ -f "$dir/modulecmd.tcl" ]; then
        log "pyopencl $version test files: present"
        return 0
    fi
    log "pyopencl $version test files: downloading its source distribution"
    rm -rf "$dir"
    mkdir -p "$dir"
    "$py" - "$version" "$dir" <<'PY' || die "could not get pyopencl's test files"
import io, re, sys, tarfile, urllib.request
version, dest = sys.argv[1], sys.argv[2]
req = urllib.request.Request("https://pypi.org/simple/pyopencl/", headers={"Accept": "text/html"})
html = urllib.request.urlopen(req, timeout=120).read().decode()
links = re.findall(r'href="([^"#]+/pyopencl-%s\.tar\.gz)#sha256=([0-9a-f]+)"' % re.escape(version), html)
if not links:
    sys.exit("no source distribution of pyopencl %s on PyPI" % version)
url, sha = links[0]
data = urllib.request.urlopen(url, timeout=300).read()
import hashlib
if hashlib.sha256(data).hexdigest() != sha:
    sys.exit("the source distribution's checksum differs from the index's")
with tarfile.open(fileobj=io.BytesIO(data)) as t:
    for m in t.getmembers():
        parts = m.name.split("/")
        if len(parts) == 3 and parts[1] == "test" and m.isfile():
            m.name = parts[2]
            t.extract(m, dest)
PY
    printf '%s\n' "$version" > "$dir/clshim-stamp"
}

# ensure_environment_modules: Environment Modules (the Tcl modules tool), for the test of
# clshim's Tcl module file. Debian's environment-modules package conflicts with lmod, which
# EasyBuild needs, so it is not installed: its .deb is downloaded with apt-get and unpacked
# into .venv/environment-modules/, whose modulecmd.tcl (linked as
# .venv/environment-modules/modulecmd.tcl) tclsh runs; the `module` function of its bash
# init, which names the installed path, is one line the test defines itself.
ensure_environment_modules() {
    local dir="$CLSHIM_ROOT/.venv/environment-modules" version
    version="$(apt-cache policy environment-modules 2>/dev/null | sed -n 's/^ *Candidate: //p')"
    if [ -z "$version" ] || [ "$version" = "(none)" ]; then
        local SUDO=()
        [ "$(id -u)" -eq 0 ] || SUDO=(sudo)
        "${SUDO[@]}" apt-get update -q >/dev/null || die "apt-get update failed"
        version="$(apt-cache policy environment-modules | sed -n 's/^ *Candidate: //p')"
    fi
    if [ -z "$version" ] || [ "$version" = "(none)" ]; then
        die "apt knows no environment-modules package"
    fi
    if [ -f "$dir/clshim-stamp" ] && [ "$(cat "$dir/clshim-stamp")" = "$version" ] \
        && [ -f "$dir/modulecmd.tcl" ]; then
        log "environment-modules $version: present"
        return 0
    fi
    log "environment-modules $version: downloading its .deb and unpacking it (not installing it)"
    rm -rf "$dir"
    mkdir -p "$dir/deb"
    (cd "$dir/deb" && apt-get download -q "environment-modules=$version" >/dev/null 2>&1) \
        || die "apt-get download environment-modules failed"
    dpkg-deb -x "$dir"/deb/environment-modules_*.deb "$dir/root" || die "dpkg-deb -x failed"
    rm -rf "$dir/deb"
    local cmd
    cmd="$(find "$dir/root" -name modulecmd.tcl -type f | head -n 1)"
    [ -n "$cmd" ] || die "no modulecmd.tcl in environment-modules $version"
    ln -s "${cmd#"$dir"/}" "$dir/modulecmd.tcl"
    printf '%s\n' "$version" > "$dir/clshim-stamp"
}

# The pyopencl wheels bundle their own ocl-icd loader. Point it (and the system loader)
# at Debian's vendor directory explicitly, so pocl is found whatever the wheel's default is.
clshim_opencl_env() {
    if [ -z "${OCL_ICD_VENDORS:-}" ] && [ -d /etc/OpenCL/vendors ]; then
        export OCL_ICD_VENDORS=/etc/OpenCL/vendors
    fi
}

# check_pyopencl_sees_pocl NAME: fails loudly when the venv's pyopencl finds no pocl device.
check_pyopencl_sees_pocl() {
    local py="$CLSHIM_ROOT/.venv/$1/bin/python" out
    out="$("$py" - <<'PY' 2>&1
import pyopencl as cl
names = [f"{p.name} / {d.name}" for p in cl.get_platforms() for d in p.get_devices()]
print("; ".join(names))
raise SystemExit(0 if any("Portable Computing Language" in p.name for p in cl.get_platforms()) else 1)
PY
)" || die "pyopencl in .venv/$1 does not see pocl (OCL_ICD_VENDORS=${OCL_ICD_VENDORS:-unset}): $out"
    log "venv $1: pyopencl $("$py" -c 'import pyopencl; print(pyopencl.VERSION_TEXT)') sees: $out"
}

# python_bench SCRIPT [ARGS...]: what every Python benchmark under bench/ needs (the Debian
# packages, .venv/old with pyopencl 2023.1, the OpenCL environment, the release build),
# then SCRIPT run by .venv/old's Python in place of the calling shell.
python_bench() {
    local script="$1"
    shift
    ensure_system_packages
    ensure_venv old
    clshim_opencl_env
    ensure_cargo
    (cd "$CLSHIM_ROOT" && cargo build --release --quiet)
    exec "$CLSHIM_ROOT/.venv/old/bin/python" "$CLSHIM_ROOT/bench/$script" "$@"
}
