/* The hot path of a kernel launch already seen: N x clEnqueueNDRangeKernel of one kernel and
 * configuration launched before (so clshim records nothing), in batches of 256 followed by
 * clFinish, against the real implementation (bench/hot_path.sh runs it under each door).
 *   hot_path N   prints "ns/call: X" for the enqueue calls alone (the clFinish time left out)
 * Under valgrind --tool=callgrind --collect-atstart=no, only the enqueue calls are counted:
 * CALLGRIND_TOGGLE_COLLECT brackets each batch (outside valgrind it costs a few
 * instructions, the same with and without clshim). */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <valgrind/callgrind.h>

#define CHECK(x) do { cl_int e_ = (x); if (e_ != CL_SUCCESS) { fprintf(stderr, "%s failed: %d\n", #x, e_); exit(1); } } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 25600;
  n = (n + 255) / 256 * 256;
  cl_platform_id pf; cl_device_id dev; cl_int err;
  CHECK(clGetPlatformIDs(1, &pf, NULL));
  CHECK(clGetDeviceIDs(pf, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err); CHECK(err);
  const char *s = "__kernel void axpy(__global float *y, __global const float *x, float a)"
                  " { int i = get_global_id(0); y[i] = a * x[i] + y[i]; }";
  cl_program p = clCreateProgramWithSource(ctx, 1, &s, NULL, &err); CHECK(err);
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
  for (int i = 0; i < 512; i++) CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL));
  CHECK(clFinish(q));
  double total = 0;
  cl_int bad = CL_SUCCESS;
  for (long done = 0; done < n; done += 256) {
    double t0 = now();
    CALLGRIND_TOGGLE_COLLECT;
    for (int i = 0; i < 256; i++) {
      cl_int r = clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL);
      if (r != CL_SUCCESS) bad = r;
    }
    CALLGRIND_TOGGLE_COLLECT;
    total += now() - t0;
    CHECK(clFinish(q));
  }
  CHECK(bad);
  printf("calls: %ld\nns/call: %.1f\n", n, total / n * 1e9);
  clReleaseMemObject(x); clReleaseMemObject(y);
  clReleaseKernel(k); clReleaseCommandQueue(q);
  clReleaseProgram(p); clReleaseContext(ctx);
  return 0;
}
