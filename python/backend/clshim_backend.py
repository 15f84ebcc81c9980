"""PEP 517 build backend of the clshim wheel: maturin, plus one step maturin lacks.

maturin builds the crate (bindings "bin") and writes a wheel with the ``clshim``
executable as a script, but it has no way to ship a second artifact of the same crate,
the interposer cdylib ``libclshim.so``, which cargo builds in the same run: cargo builds
a package's library target, every crate type of it, before the package's binaries, even
though the executable links none of it (it compiles in the few source files it shares
with the library, see ``src/bin/clshim/main.rs``). This
module delegates every hook to maturin and then rewrites the wheel so that the
executable and the library lie side by side in the ``clshim`` package directory:

    clshim/__init__.py, clshim/__main__.py   the launcher (``clshim`` entry point)
    clshim/clshim                            the executable (from .data/scripts/)
    clshim/libclshim.so                      the library (libclshim.dylib on macOS)

Side by side, the executable finds the library next to itself however the wheel was
installed (virtual environment, ``--user``, ``--prefix``, ``--target``, conda), which a
script in ``bin/`` cannot do for a file in ``site-packages``.

On Linux the default build links with zig (PyPI ``ziglang``) against glibc 2.17's
symbols, so the wheel is ``manylinux_2_17`` (manylinux2014) instead of the build
machine's glibc. ``-C zig=false`` (``pip wheel . -C zig=false``) builds with the system
linker for this machine only; maturin's own ``MATURIN_PEP517_ARGS`` or ``-C
maturin.build-args=...`` replace these defaults entirely.
"""

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from contextlib import contextmanager

import maturin

MANYLINUX = "manylinux_2_17"

get_requires_for_build_sdist = maturin.get_requires_for_build_sdist


@contextmanager
def _tools_on_path(extra=()):
    """maturin's hooks run the ``maturin`` executable from PATH: put this interpreter's
    scripts folder (where pip installed it) first, so a build without isolation from an
    environment that is not activated works too."""
    old = os.environ.get("PATH", "")
    dirs = list(extra) + [sysconfig.get_path("scripts")]
    os.environ["PATH"] = os.pathsep.join(dirs + ([old] if old else []))
    try:
        yield
    finally:
        os.environ["PATH"] = old


def build_sdist(sdist_directory, config_settings=None):
    with _tools_on_path():
        return maturin.build_sdist(sdist_directory, config_settings)


def _lib_name():
    return "libclshim.dylib" if sys.platform == "darwin" else "libclshim.so"


def _user_args(config_settings):
    cs = config_settings or {}
    return (
        "maturin.build-args" in cs
        or "build-args" in cs
        or bool(os.environ.get("MATURIN_PEP517_ARGS"))
    )


def _use_zig(config_settings):
    flag = str((config_settings or {}).get("zig", "true")).lower()
    return (
        sys.platform.startswith("linux")
        and flag not in ("0", "false", "no", "off")
        and not _user_args(config_settings)
    )


def get_requires_for_build_wheel(config_settings=None):
    reqs = list(maturin.get_requires_for_build_wheel(config_settings))
    if _use_zig(config_settings):
        reqs.append("ziglang")
    return reqs


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    settings = {k: v for k, v in (config_settings or {}).items() if k != "zig"}
    extra = []
    if _use_zig(config_settings):
        import ziglang  # the zig executable ships inside the package

        extra.append(os.path.dirname(ziglang.__file__))
        settings["maturin.build-args"] = "--zig --compatibility " + MANYLINUX
    with _tools_on_path(extra), tempfile.TemporaryDirectory() as tmp:
        name = maturin.build_wheel(tmp, settings or None, None)
        _add_library(os.path.join(tmp, name), os.path.join(wheel_directory, name))
    return name


def _target_dir():
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        check=True,
        stdout=subprocess.PIPE,
    ).stdout
    return json.loads(out)["target_directory"]


def _built_library(executable_bytes):
    """The cdylib cargo built together with the executable in the wheel: the profile
    folder (``target[/TRIPLE]/PROFILE``) whose ``clshim`` is byte for byte that
    executable holds it in ``deps/`` (cargo copies only requested targets up)."""
    target = _target_dir()
    folders = []
    for root in [target] + [os.path.join(target, d) for d in sorted(os.listdir(target))]:
        if os.path.isdir(root):
            folders += [os.path.join(root, p) for p in sorted(os.listdir(root))]
    for folder in folders:
        exe = os.path.join(folder, "clshim")
        lib = os.path.join(folder, "deps", _lib_name())
        if not (os.path.isfile(exe) and os.path.isfile(lib)):
            continue
        if os.path.getsize(exe) != len(executable_bytes):
            continue
        with open(exe, "rb") as f:
            if f.read() == executable_bytes:
                return lib
    raise RuntimeError(
        "clshim wheel: cannot find the %s that cargo built with the executable under %s"
        % (_lib_name(), target)
    )


def _record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode("ascii")


def _add_library(src, dst):
    """Copies wheel `src` to `dst`, moving the executable from ``.data/scripts/`` into
    the package, adding the library beside it and the ``clshim`` entry point, and
    writing RECORD anew."""
    with zipfile.ZipFile(src) as zin:
        infos = zin.infolist()
        dist_info = next(i.filename.split("/")[0] for i in infos
                         if i.filename.endswith(".dist-info/RECORD"))
        data_dir = dist_info[: -len(".dist-info")] + ".data"
        files = []  # (name, bytes, executable)
        executable = None
        for i in infos:
            if i.filename == dist_info + "/RECORD":
                continue
            data = zin.read(i)
            if i.filename == data_dir + "/scripts/clshim":
                executable = data
                continue
            files.append((i.filename, data, bool((i.external_attr >> 16) & 0o111)))
    if executable is None:
        raise RuntimeError("clshim wheel: maturin's wheel has no %s/scripts/clshim" % data_dir)
    with open(_built_library(executable), "rb") as f:
        library = f.read()
    files.append(("clshim/clshim", executable, True))
    files.append(("clshim/" + _lib_name(), library, True))
    files.append((dist_info + "/entry_points.txt",
                  b"[console_scripts]\nclshim = clshim:main\n", False))
    # dist-info last, RECORD at the very end, as the wheel format recommends.
    files.sort(key=lambda f: (f[0].startswith(dist_info), f[0]))
    record = io.StringIO()
    w = csv.writer(record, lineterminator="\n")
    for name, data, _ in files:
        w.writerow([name, _record_hash(data), len(data)])
    w.writerow([dist_info + "/RECORD", "", ""])
    files.append((dist_info + "/RECORD", record.getvalue().encode(), False))
    tmp = dst + ".part"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
        for name, data, is_exe in files:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if is_exe else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(info, data)
    shutil.move(tmp, dst)
