"""clshim: an OpenCL interposer that times program builds and binary queries per process
and MPI rank, and can spare pocl's CPU driver the second compile a binary query causes.

This package holds the native parts side by side: the ``clshim`` executable and the
interposer library (``libclshim.so``; ``libclshim.dylib`` on macOS). The ``clshim``
command and ``python -m clshim`` both run :func:`main`, which replaces the Python process
with the executable; the executable finds the library beside itself, so ``clshim run``
needs no option and no environment variable.
"""

import os
import sys

__all__ = ["executable", "library", "main"]

_HERE = os.path.dirname(os.path.abspath(__file__))


def executable():
    """Path of the bundled ``clshim`` executable."""
    return os.path.join(_HERE, "clshim")


def library():
    """Path of the bundled interposer library (what ``clshim run`` preloads)."""
    name = "libclshim.dylib" if sys.platform == "darwin" else "libclshim.so"
    return os.path.join(_HERE, name)


# What Python itself ignores at start-up (CPython's signal module init): the same set that
# subprocess's restore_signals=True puts back to the default for a child. Handlers Python
# installs (SIGINT) are reset by exec itself; Python changes no signal mask.
_PYTHON_IGNORED = ("SIGPIPE", "SIGXFZ", "SIGXFSZ")


def _set_signals(dispositions):
    """Sets each (signal, disposition); returns the previous ones."""
    import signal

    previous = []
    for sig, disposition in dispositions:
        try:
            previous.append((sig, signal.signal(sig, disposition)))
        except (OSError, ValueError, TypeError):
            pass
    return previous


def _restore_signals():
    """Undoes what Python changed, so the command gets the signals it would get without
    clshim; returns what to set again should exec fail. Only those: a disposition the
    user set before Python started (nohup's SIGHUP, a blocked signal) is the user's and
    stays."""
    import signal

    sigs = [getattr(signal, n) for n in _PYTHON_IGNORED if hasattr(signal, n)]
    return _set_signals([(sig, signal.SIG_DFL) for sig in sigs])


def main():
    """Runs the ``clshim`` executable with this process's arguments, in its place (same
    process id, so exit status, signals and streams are the executable's own)."""
    exe = executable()
    python_signals = _restore_signals()
    try:
        os.execv(exe, ["clshim"] + sys.argv[1:])
    except OSError as e:
        _set_signals(python_signals)
        sys.stderr.write(
            "clshim: the clshim Python package in %s is damaged: cannot run %s (%s); "
            "reinstall it: python -m pip install --force-reinstall clshim "
            "(or the wheel you installed)\n" % (_HERE, exe, e.strerror or e)
        )
        return 2
    return 2  # not reached: execv returns only by raising
