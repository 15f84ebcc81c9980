/* Writer of kept sources for tests/why.rs: builds SHARED programs whose texts every
 * process shares and UNIQUE programs whose texts hold this process's pid, each text
 * padded with a comment of PAD bytes (so a partly written file would show), each built
 * with `-DK=<k>`. Prints "done N" after N builds.
 *   why_writer SHARED UNIQUE PAD */
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(x) do { cl_int e_ = (x); if (e_ != CL_SUCCESS) { fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(3); } } while (0)

int main(int argc, char **argv) {
  if (argc < 4) return 2;
  int shared = atoi(argv[1]), unique = atoi(argv[2]);
  size_t pad = (size_t)atol(argv[3]);
  cl_platform_id pf; cl_device_id dev; cl_int err;
  CHECK(clGetPlatformIDs(1, &pf, NULL));
  CHECK(clGetDeviceIDs(pf, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err); CHECK(err);
  char *src = malloc(pad + 512);
  int n = 0;
  for (int i = 0; i < shared + unique; i++) {
    int mine = i >= shared;
    int len = snprintf(src, 512, "__kernel void f%d(__global int *a) { a[0] = %d; }\n/* %s %d ",
                       i, i, mine ? "pid" : "shared", mine ? (int)getpid() : 0);
    memset(src + len, 'x', pad);
    strcpy(src + len + pad, " */\n");
    const char *s = src;
    char opts[32];
    snprintf(opts, sizeof opts, "-DK=%d", i);
    cl_program p = clCreateProgramWithSource(ctx, 1, &s, NULL, &err); CHECK(err);
    CHECK(clBuildProgram(p, 1, &dev, opts, NULL, NULL));
    CHECK(clReleaseProgram(p));
    n++;
  }
  printf("done %d\n", n);
  free(src);
  return 0;
}
