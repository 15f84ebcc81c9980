"""What the benchmarks' Python drivers share: the CPU time of this process's children, and
a command run to its end with the CPU and wall time it took."""
import resource
import subprocess
import time


def children_cpu():
    """User + system seconds of every child process that ended so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd, env):
    """(CPU seconds, wall seconds, the completed process) of `cmd` run to its end, with its
    standard output and error captured as text."""
    cpu0, t0 = children_cpu(), time.perf_counter()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return children_cpu() - cpu0, time.perf_counter() - t0, p
