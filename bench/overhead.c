/* clshim overhead probe: run it with and without LD_PRELOAD=libclshim.so (bench/overhead.sh
 * does both, side by side).
 *   overhead calls N   N x clGetProgramInfo(CL_PROGRAM_NUM_DEVICES): prints ns per call
 *   overhead builds N  N x clBuildProgram of one program: prints each build's seconds as
 *                      the application sees it, one per line (with the shim, the trace's
 *                      "seconds" of the same build is the forwarded call alone, so the
 *                      difference is clshim's own work, free of build-to-build noise)
 *   overhead cold      one build of a source never built before: prints seconds
 *   overhead launches N  N x clEnqueueNDRangeKernel of one kernel and configuration already
 *                      launched (so clshim does not record it), in batches of 256 followed
 *                      by clFinish; prints ns per enqueue call, the clFinish time left out
 *   overhead launch-path N  the same calls with the queue's dispatch entry for
 *                      clEnqueueNDRangeKernel replaced by one that returns at once: the
 *                      call path alone (the loader's trampoline without the shim, clshim's
 *                      already-seen check, with its clGetCommandQueueInfo, with it) */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The enqueue of "launch-path": nothing is run. */
static cl_int CL_API_CALL no_enqueue(cl_command_queue q, cl_kernel k, cl_uint d, const size_t *o,
                                     const size_t *g, const size_t *l, cl_uint n,
                                     const cl_event *w, cl_event *e) {
  (void)q; (void)k; (void)d; (void)o; (void)g; (void)l; (void)n; (void)w; (void)e;
  return CL_SUCCESS;
}

/* Dispatch-table slot of clEnqueueNDRangeKernel (cl_khr_icd ordering) and the number of
 * entries copied from the driver's table. */
#define SLOT_ENQUEUE_ND_RANGE_KERNEL 59
#define TABLE_ENTRIES 149

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

#define CHECK(x) do { cl_int e_ = (x); if (e_ != CL_SUCCESS) { fprintf(stderr, "%s failed: %d\n", #x, e_); exit(1); } } while (0)

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: overhead calls N | builds N | cold | launches N | launch-path N\n"); return 2; }
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
  } else if (strcmp(argv[1], "launches") == 0 || strcmp(argv[1], "launch-path") == 0) {
    CHECK(clBuildProgram(p, 1, &dev, NULL, NULL, NULL));
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err); CHECK(err);
    cl_kernel k = clCreateKernel(p, "axpy", &err); CHECK(err);
    size_t global = 64, local = 16;
    cl_mem y = clCreateBuffer(ctx, CL_MEM_READ_WRITE, global * sizeof(float), NULL, &err); CHECK(err);
    cl_mem x = clCreateBuffer(ctx, CL_MEM_READ_WRITE, global * sizeof(float), NULL, &err); CHECK(err);
    float a = 0.0f;
    CHECK(clSetKernelArg(k, 0, sizeof y, &y));
    CHECK(clSetKernelArg(k, 1, sizeof x, &x));
    CHECK(clSetKernelArg(k, 2, sizeof a, &a));
    /* The first launch (the one clshim records), then a warm-up. */
    for (int i = 0; i < 1000; i++) CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL));
    CHECK(clFinish(q));
    double total = 0;
    if (strcmp(argv[1], "launches") == 0) {
      for (long done = 0; done < n; done += 256) {
        double t0 = now();
        for (int i = 0; i < 256; i++) clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL);
        total += now() - t0;
        CHECK(clFinish(q));
      }
      n = (n + 255) / 256 * 256;
    } else {
      /* The queue's first word points at its dispatch table: point it at a copy whose
       * enqueue entry runs nothing, and put it back before releasing the queue. */
      void **obj = (void **)q;
      void **real_table = (void **)obj[0];
      void *table[TABLE_ENTRIES];
      memcpy(table, real_table, sizeof table);
      table[SLOT_ENQUEUE_ND_RANGE_KERNEL] = (void *)no_enqueue;
      obj[0] = table;
      double t0 = now();
      for (long i = 0; i < n; i++) clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL);
      total = now() - t0;
      obj[0] = real_table;
    }
    printf("%.2f\n", total / n * 1e9);
    clReleaseMemObject(x); clReleaseMemObject(y);
    clReleaseKernel(k); clReleaseCommandQueue(q);
  } else {
    double t0 = now();
    CHECK(clBuildProgram(p, 1, &dev, NULL, NULL, NULL));
    printf("%.6f\n", now() - t0);
  }
  clReleaseProgram(p);
  clReleaseContext(ctx);
  return 0;
}
