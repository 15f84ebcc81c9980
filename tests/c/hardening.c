/* Hardening probe for clshim: real pocl through the system loader, one subcommand per
 * scenario of tests/hardening/hardening_processes.rs and tests/hardening/hardening_trace_files.rs.
 *   fork FORKS      a thread builds programs while main forks FORKS times; each child
 *                   builds its own program and queries its binary
 *   fork-idle       one build, then a fork with no other thread; the child builds
 *   exit MODE N     N builds + binary queries, then leave by MODE: normal | thread | _exit | signal
 *   stress T N      T threads x N builds and binary queries each; prints resident memory
 *                   (KiB) after the first and the last round as "rss FIRST LAST"
 *   gap FILE        one build, waits until FILE exists, then another build
 *   reuse-fd FILE   one build, then closes every descriptor above 2 (as daemons do) and
 *                   writes two lines of its own to FILE (which gets the lowest free
 *                   descriptor) around a second build */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(x) do { cl_int e_ = (x); if (e_ != CL_SUCCESS) { fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(3); } } while (0)

static cl_device_id dev;
static cl_context ctx;

static void setup(void) {
  cl_platform_id pf; cl_int err;
  CHECK(clGetPlatformIDs(1, &pf, NULL));
  CHECK(clGetDeviceIDs(pf, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
  ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err); CHECK(err);
}

/* Builds a small program whose constant is `k` (distinct k: distinct source) and asks for
 * its binary the way a binary cache does. Returns the binary size. */
static size_t build_and_query(int k) {
  char src[256]; cl_int err;
  snprintf(src, sizeof src, "__kernel void f(__global int *a) { a[get_global_id(0)] += %d; }", k);
  const char *s = src;
  cl_program p = clCreateProgramWithSource(ctx, 1, &s, NULL, &err); CHECK(err);
  CHECK(clBuildProgram(p, 1, &dev, NULL, NULL, NULL));
  size_t size = 0;
  CHECK(clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL));
  unsigned char *bin = malloc(size ? size : 1), *bins[1] = {bin};
  CHECK(clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL));
  free(bin);
  CHECK(clReleaseProgram(p));
  return size;
}

static volatile int keep_building;
static void *builder(void *arg) {
  int base = (int)(long)arg;
  for (int i = 0; keep_building; i++) build_and_query(base + i % 4);
  return NULL;
}

static long rss_kib(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) { if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0; fclose(f); }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static int stress_n;
static void *stress_worker(void *arg) {
  int t = (int)(long)arg;
  /* Few distinct sources per thread: pocl's kernel cache keeps most builds cheap. */
  for (int i = 0; i < stress_n; i++) build_and_query(1000 * t + i % 2);
  return NULL;
}

static void stress_phase(int threads) {
  pthread_t th[256];
  for (int t = 0; t < threads; t++) pthread_create(&th[t], NULL, stress_worker, (void *)(long)t);
  for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
}

static int exit_n;
static void *exit_thread(void *arg) { (void)arg; exit(0); }

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  setup();
  if (strcmp(argv[1], "fork") == 0 || strcmp(argv[1], "fork-idle") == 0) {
    /* fork: FORKS forks while another thread builds without pause (run it on a driver
     * that is itself fork-safe: pocl is not, its own locks can be held at the fork).
     * fork-idle: one build, then one fork with no other thread running. */
    int busy = strcmp(argv[1], "fork") == 0;
    int forks = busy && argc > 2 ? atoi(argv[2]) : 1;
    pthread_t th;
    if (busy) {
      keep_building = 1;
      pthread_create(&th, NULL, builder, (void *)100L);
    } else {
      build_and_query(100);
    }
    int failed = 0;
    for (int f = 0; f < forks; f++) {
      usleep(3 * 1000);
      pid_t pid = fork();
      if (pid == 0) {
        size_t n = build_and_query(7 + f);
        printf("child %d built, binary %s\n", f, n > 0 ? "non-empty" : "empty");
        fflush(stdout);
        _exit(0);
      }
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
    }
    if (busy) {
      keep_building = 0;
      pthread_join(th, NULL);
    }
    printf("parent done, %d children failed\n", failed);
    return failed != 0;
  }
  if (strcmp(argv[1], "exit") == 0 && argc > 3) {
    exit_n = atoi(argv[3]);
    for (int i = 0; i < exit_n; i++) build_and_query(i);
    fflush(stdout);
    if (strcmp(argv[2], "thread") == 0) {
      pthread_t th; pthread_create(&th, NULL, exit_thread, NULL); pthread_join(th, NULL);
    } else if (strcmp(argv[2], "_exit") == 0) {
      _exit(0);
    } else if (strcmp(argv[2], "signal") == 0) {
      signal(SIGTERM, SIG_DFL); raise(SIGTERM);
    }
    return 0;
  }
  if (strcmp(argv[1], "stress") == 0 && argc > 3) {
    int threads = atoi(argv[2]);
    if (threads > 256) threads = 256;
    stress_n = atoi(argv[3]);
    /* Two identical phases: memory that grows with the number of builds shows as growth
     * from the end of the first to the end of the second. */
    stress_phase(threads);
    long first = rss_kib();
    stress_phase(threads);
    printf("rss %ld %ld\n", first, rss_kib());
    printf("done %d\n", 2 * threads * stress_n);
    return 0;
  }
  if (strcmp(argv[1], "reuse-fd") == 0 && argc > 2) {
    build_and_query(1);
    for (int fd = 3; fd < 1024; fd++) close(fd);
    int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return 3;
    dprintf(fd, "app line 1\n");
    build_and_query(2);
    dprintf(fd, "app line 2\n");
    close(fd);
    printf("reuse-fd: own file on descriptor %d\n", fd);
    return 0;
  }
  if (strcmp(argv[1], "gap") == 0 && argc > 2) {
    build_and_query(1);
    while (access(argv[2], F_OK) != 0) usleep(10 * 1000);
    build_and_query(2);
    printf("gap done\n");
    return 0;
  }
  return 2;
}
