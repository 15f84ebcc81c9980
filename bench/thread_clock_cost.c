/* What reading CPU clocks costs clshim per record (bench/thread_clock_cost.sh runs it).
 * A build, compile, link or binary query reads the calling thread's CPU clock and the
 * reaped children's CPU (getrusage RUSAGE_CHILDREN) at its start and at its end; a first
 * launch reads the process's CPU clock, the launching thread's clock through its clock id
 * and the children's CPU at its enqueue and at its completion, after asking for that
 * clock id once. Each reading is timed alone (nanoseconds per call, the median of
 * REPS runs of CALLS calls), beside CLOCK_MONOTONIC (a vDSO read, no system call), and
 * summed per record as clshim makes them.
 *   usage: thread_clock_cost [CALLS] [REPS]      prints one line per measurement */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static volatile long sink;
static clockid_t launcher;

static void read_monotonic(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); sink += t.tv_nsec; }
static void read_thread(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); sink += t.tv_nsec; }
static void read_process(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); sink += t.tv_nsec; }
static void read_launcher(void) { struct timespec t; clock_gettime(launcher, &t); sink += t.tv_nsec; }
static void read_children(void) { struct rusage r; getrusage(RUSAGE_CHILDREN, &r); sink += r.ru_utime.tv_usec; }
static void clock_id(void) { clockid_t c; pthread_getcpuclockid(pthread_self(), &c); sink += c; }

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nanoseconds per call of f: the median of reps runs of calls calls. */
static double cost(void (*f)(void), long calls, int reps) {
    double *v = malloc(sizeof(double) * reps);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        for (long i = 0; i < calls; i++) f();
        v[r] = (now() - t0) * 1e9 / calls;
    }
    qsort(v, reps, sizeof(double), cmp);
    double m = v[reps / 2];
    free(v);
    return m;
}

int main(int argc, char **argv) {
    long calls = argc > 1 ? atol(argv[1]) : 1000000;
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    pthread_getcpuclockid(pthread_self(), &launcher);
    double mono = cost(read_monotonic, calls, reps);
    double thread = cost(read_thread, calls, reps);
    double process = cost(read_process, calls, reps);
    double by_id = cost(read_launcher, calls, reps);
    double children = cost(read_children, calls, reps);
    double id = cost(clock_id, calls, reps);
    printf("calls %ld, median of %d runs, ns per call\n", calls, reps);
    printf("CLOCK_MONOTONIC (vDSO, for comparison)   %8.1f\n", mono);
    printf("CLOCK_THREAD_CPUTIME_ID                  %8.1f\n", thread);
    printf("getrusage(RUSAGE_CHILDREN)               %8.1f\n", children);
    printf("CLOCK_PROCESS_CPUTIME_ID                 %8.1f\n", process);
    printf("a thread's clock by its clock id         %8.1f\n", by_id);
    printf("pthread_getcpuclockid                    %8.1f\n", id);
    printf("per build, compile, link or binary query %8.1f   (2 x (thread clock + children))\n",
           2 * (thread + children));
    printf("per first launch                         %8.1f   (clock id + 2 x (process + launcher + children))\n",
           id + 2 * (process + by_id + children));
    return (int)(sink & 0);
}
