/* bench/hot_path.c with one thing changed at a time, to find what makes clshim's cost per
 * launch already seen differ between clients (bench/hot_path_variants.sh runs it; the
 * results are in bench/results/hot-path.md). Every knob is an environment variable whose
 * default is what bench/hot_path.c does:
 *   HP_ARGS=3       kernel arguments (0 to 8: buffers y, x1, x2, ...; y[i] += x1[i] + ...)
 *   HP_GLOBAL=64    global size of dimension 0
 *   HP_LOCAL=16     local size of dimension 0 (0: NULL, the implementation picks)
 *   HP_DIM=1        work dimensions (1 to 3; dimensions above the first are 1 wide)
 *   HP_BATCH=256    launches between two clFinish calls
 *   HP_EVENT=0      1: ask an event at every launch and release it at once
 *   HP_OFFSET=0     1: pass a global offset of zeros
 *   HP_KERNELS=1    kernel objects of the program, launched in turn (one configuration each)
 *   HP_QUEUES=1     queues, launched on in turn
 *   HP_PROFILING=0  1: the queue has CL_QUEUE_PROFILING_ENABLE
 *   HP_WARMUP=512   launches before the counted ones (the first is the one clshim records)
 *   hot_path_variants N   prints "ns/call: X" for the enqueue calls alone
 * Under valgrind --tool=callgrind --collect-atstart=no only the enqueue calls are counted
 * (CALLGRIND_TOGGLE_COLLECT around each batch, as in bench/hot_path.c). */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <valgrind/callgrind.h>

#define CHECK(x) do { cl_int e_ = (x); if (e_ != CL_SUCCESS) { fprintf(stderr, "%s failed: %d\n", #x, e_); exit(1); } } while (0)

static long knob(const char *name, long dflt) {
  const char *v = getenv(name);
  return v && *v ? atol(v) : dflt;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 25600;
  int nargs = (int)knob("HP_ARGS", 3), dim = (int)knob("HP_DIM", 1);
  long batch = knob("HP_BATCH", 256), nk = knob("HP_KERNELS", 1), nq = knob("HP_QUEUES", 1);
  int want_event = (int)knob("HP_EVENT", 0), with_offset = (int)knob("HP_OFFSET", 0);
  if (nargs < 0 || nargs > 8 || dim < 1 || dim > 3 || batch < 1 || nk < 1 || nk > 64 || nq < 1 || nq > 16) {
    fprintf(stderr, "knob out of range\n");
    return 2;
  }
  n = (n + batch - 1) / batch * batch;
  size_t global[3] = {(size_t)knob("HP_GLOBAL", 64), 1, 1};
  size_t local_[3] = {(size_t)knob("HP_LOCAL", 16), 1, 1};
  size_t offset[3] = {0, 0, 0};
  const size_t *local = local_[0] ? local_ : NULL;
  cl_platform_id pf; cl_device_id dev; cl_int err;
  CHECK(clGetPlatformIDs(1, &pf, NULL));
  CHECK(clGetDeviceIDs(pf, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err); CHECK(err);
  /* k<i>(y, x1 .. x<nargs-1>): y[i] += x1[i] + ...; one kernel per object asked for. */
  char src[8192] = "", params[512], body[512];
  for (long k = 0; k < nk; k++) {
    strcpy(params, nargs ? "__global float *y" : "");
    strcpy(body, "");
    for (int a = 1; a < nargs; a++) {
      char p[64], b[64];
      snprintf(p, sizeof p, ", __global const float *x%d", a);
      snprintf(b, sizeof b, " + x%d[i]", a);
      strcat(params, p);
      strcat(body, b);
    }
    char one[1200];
    if (nargs)
      snprintf(one, sizeof one, "__kernel void k%ld(%s) { int i = get_global_id(0); y[i] = y[i]%s; }\n", k, params, body);
    else
      snprintf(one, sizeof one, "__kernel void k%ld(void) { }\n", k);
    strcat(src, one);
  }
  const char *s = src;
  cl_program p = clCreateProgramWithSource(ctx, 1, &s, NULL, &err); CHECK(err);
  CHECK(clBuildProgram(p, 1, &dev, NULL, NULL, NULL));
  cl_command_queue q[16];
  cl_command_queue_properties props = knob("HP_PROFILING", 0) ? CL_QUEUE_PROFILING_ENABLE : 0;
  for (long i = 0; i < nq; i++) { q[i] = clCreateCommandQueue(ctx, dev, props, &err); CHECK(err); }
  size_t bytes = global[0] * sizeof(float);
  cl_mem bufs[8] = {0};
  for (int a = 0; a < nargs; a++) { bufs[a] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err); CHECK(err); }
  cl_kernel kern[64];
  for (long k = 0; k < nk; k++) {
    char name[16];
    snprintf(name, sizeof name, "k%ld", k);
    kern[k] = clCreateKernel(p, name, &err); CHECK(err);
    for (int a = 0; a < nargs; a++) CHECK(clSetKernelArg(kern[k], a, sizeof bufs[a], &bufs[a]));
  }
  const size_t *off = with_offset ? offset : NULL;
  cl_event ev, *evp = want_event ? &ev : NULL;
#define LAUNCH(i) do { \
    cl_int r_ = clEnqueueNDRangeKernel(q[(i) % nq], kern[(i) % nk], dim, off, global, local, 0, NULL, evp); \
    if (r_ != CL_SUCCESS) bad = r_; \
    if (evp && r_ == CL_SUCCESS) clReleaseEvent(ev); \
  } while (0)
  cl_int bad = CL_SUCCESS;
  long warmup = knob("HP_WARMUP", 512);
  for (long i = 0; i < warmup; i++) LAUNCH(i);
  for (long i = 0; i < nq; i++) CHECK(clFinish(q[i]));
  CHECK(bad);
  double total = 0;
  for (long done = 0; done < n; done += batch) {
    double t0 = now();
    CALLGRIND_TOGGLE_COLLECT;
    for (long i = 0; i < batch; i++) LAUNCH(done + i);
    CALLGRIND_TOGGLE_COLLECT;
    total += now() - t0;
    for (long i = 0; i < nq; i++) CHECK(clFinish(q[i]));
  }
  CHECK(bad);
  printf("calls: %ld\nns/call: %.1f\n", n, total / n * 1e9);
  for (int a = 0; a < nargs; a++) clReleaseMemObject(bufs[a]);
  for (long k = 0; k < nk; k++) clReleaseKernel(kern[k]);
  for (long i = 0; i < nq; i++) clReleaseCommandQueue(q[i]);
  clReleaseProgram(p); clReleaseContext(ctx);
  return 0;
}
