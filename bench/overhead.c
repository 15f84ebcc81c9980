/* clshim overhead probe: run it with and without LD_PRELOAD=libclshim.so (bench/overhead.sh
 * does both, side by side).
 *   overhead calls N   N x clGetProgramInfo(CL_PROGRAM_NUM_DEVICES): prints ns per call
 *   overhead builds N  N x clBuildProgram of one program: prints each build's seconds as
 *                      the application sees it, one per line (with the shim, the trace's
 *                      "seconds" of the same build is the forwarded call alone, so the
 *                      difference is clshim's own work, free of build-to-build noise)
 *   overhead cold      one build of a source never built before: prints seconds */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

#define CHECK(x) do { cl_int e_ = (x); if (e_ != CL_SUCCESS) { fprintf(stderr, "%s failed: %d\n", #x, e_); exit(1); } } while (0)

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: overhead calls N | builds N | cold\n"); return 2; }
  long n = argc > 2 ? atol(argv[2]) : 1;
  cl_platform_id pf; cl_device_id dev; cl_int err;
  CHECK(clGetPlatformIDs(1, &pf, NULL));
  CHECK(clGetDeviceIDs(pf, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err); CHECK(err);
  char src[512];
  /* "cold" must miss every cache: a unique constant per run. */
  snprintf(src, sizeof src,
           "__kernel void axpy(__global float *y, __global const float *x, float a)"
           " { int i = get_global_id(0); y[i] = a * x[i] + y[i] + %ld.0f; }",
           strcmp(argv[1], "cold") == 0 ? (long)time(NULL) * 1000 + (long)(now() * 1e6) % 1000 : 0L);
  const char *s = src;
  cl_program p = clCreateProgramWithSource(ctx, 1, &s, NULL, &err); CHECK(err);
  if (strcmp(argv[1], "calls") == 0) {
    CHECK(clBuildProgram(p, 1, &dev, NULL, NULL, NULL));
    cl_uint nd = 0; volatile cl_uint sink = 0;
    for (long i = 0; i < 1000; i++) CHECK(clGetProgramInfo(p, CL_PROGRAM_NUM_DEVICES, sizeof nd, &nd, NULL));
    double t0 = now();
    for (long i = 0; i < n; i++) { clGetProgramInfo(p, CL_PROGRAM_NUM_DEVICES, sizeof nd, &nd, NULL); sink += nd; }
    double t1 = now();
    printf("%.2f\n", (t1 - t0) / n * 1e9);
  } else if (strcmp(argv[1], "builds") == 0) {
    CHECK(clBuildProgram(p, 1, &dev, NULL, NULL, NULL)); /* warm pocl's cache */
    for (long i = 0; i < n; i++) {
      double t0 = now();
      CHECK(clBuildProgram(p, 1, &dev, NULL, NULL, NULL));
      printf("%.9f\n", now() - t0);
    }
  } else {
    double t0 = now();
    CHECK(clBuildProgram(p, 1, &dev, NULL, NULL, NULL));
    printf("%.6f\n", now() - t0);
  }
  clReleaseProgram(p);
  clReleaseContext(ctx);
  return 0;
}
