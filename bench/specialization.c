/* Does POCL_WORK_GROUP_SPECIALIZATION=0 spare pocl its first-launch compiles? Builds one
 * kernel of S statements (source unique to the run, so pocl's kernel cache is cold),
 * optionally asks for its binaries (pocl then compiles the generic work-group function),
 * then launches it in several work-group configurations, timing each launch from enqueue to
 * clFinish twice (the first includes any compile). Finally times R steady-state launches.
 *   specialization S R [query]      prints one line per measurement (seconds)
 * bench/specialization.sh runs it with the variable unset and set to 0, side by side. */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(x) do { cl_int e_ = (x); if (e_ != CL_SUCCESS) { fprintf(stderr, "%s failed: %d\n", #x, e_); exit(1); } } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: specialization STATEMENTS REPEATS [query]\n"); return 2; }
  int statements = atoi(argv[1]);
  long repeats = atol(argv[2]);
  int query = argc > 3 && strcmp(argv[3], "query") == 0;
  cl_platform_id pf; cl_device_id dev; cl_int err;
  CHECK(clGetPlatformIDs(1, &pf, NULL));
  CHECK(clGetDeviceIDs(pf, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err); CHECK(err);
  cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err); CHECK(err);
  size_t cap = 256 + 64 * (size_t)statements;
  char *src = malloc(cap), *p = src;
  p += sprintf(p, "__constant long uniq = %ldL;\n__kernel void spec(__global float *c, __global const float *a, __global const float *b)\n{\n  int i = get_global_id(0);\n  float x = a[i];\n",
               (long)getpid() * 1000003L + (long)(now() * 1e6) % 1000003L);
  for (int s = 0; s < statements; s++) p += sprintf(p, "  x = x * b[i] + %d.5f;\n", s);
  sprintf(p, "  c[i] = x;\n}\n");
  const char *s = src;
  cl_program prog = clCreateProgramWithSource(ctx, 1, &s, NULL, &err); CHECK(err);
  double t0 = now();
  CHECK(clBuildProgram(prog, 1, &dev, NULL, NULL, NULL));
  printf("build %.4f\n", now() - t0);
  if (query) {
    size_t size = 0;
    t0 = now();
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL));
    unsigned char *bin = malloc(size);
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL));
    printf("binary_query %.4f\n", now() - t0);
    free(bin);
  }
  cl_kernel k = clCreateKernel(prog, "spec", &err); CHECK(err);
  size_t n = 1 << 16;
  cl_mem bufs[3];
  for (int i = 0; i < 3; i++) {
    bufs[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n * sizeof(float), NULL, &err); CHECK(err);
    CHECK(clSetKernelArg(k, i, sizeof bufs[i], &bufs[i]));
  }
  float one = 1.0f;
  CHECK(clEnqueueFillBuffer(q, bufs[1], &one, sizeof one, 0, n * sizeof(float), 0, NULL, NULL));
  CHECK(clEnqueueFillBuffer(q, bufs[2], &one, sizeof one, 0, n * sizeof(float), 0, NULL, NULL));
  CHECK(clFinish(q));
  /* Configurations: (global, local); local 0 = NULL (pocl chooses). */
  size_t configs[][2] = {{4096, 64}, {4096, 128}, {4096, 0}, {1000, 0}, {65536, 0}};
  double first_total = 0;
  for (unsigned c = 0; c < sizeof configs / sizeof configs[0]; c++) {
    size_t g = configs[c][0], l = configs[c][1];
    double times[2];
    for (int rep = 0; rep < 2; rep++) {
      t0 = now();
      CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, l ? &l : NULL, 0, NULL, NULL));
      CHECK(clFinish(q));
      times[rep] = now() - t0;
    }
    first_total += times[0];
    char local[24] = "NULL";
    if (l) snprintf(local, sizeof local, "%zu", l);
    printf("launch global=%zu local=%s first %.4f second %.4f\n", g, local, times[0], times[1]);
  }
  printf("first_launches_total %.4f\n", first_total);
  size_t g = n, l = 64;
  CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL));
  CHECK(clFinish(q));
  t0 = now();
  for (long r = 0; r < repeats; r++) CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL));
  CHECK(clFinish(q));
  printf("steady_launch %.6f\n", (now() - t0) / repeats);
  return 0;
}
