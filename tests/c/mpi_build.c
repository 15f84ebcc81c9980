/* One MPI rank's worth of OpenCL program building, for the `clshim run` + `report` test.
 * Started by mpiexec (it needs no MPI library: the launcher's variables name the rank).
 * Builds a two-kernel program from source on the first device of the first platform,
 * then reads CL_PROGRAM_BINARY_SIZES and CL_PROGRAM_BINARIES the way binary caches do.
 * Every rank builds the same source, so the report groups them as one program; run it
 * with POCL_KERNEL_CACHE=0 so that each rank really compiles.
 * Exit status 0 on success; any OpenCL error prints the call and code and exits 1. */
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                         \
    do {                                                                    \
        cl_int err_ = (call);                                               \
        if (err_ != CL_SUCCESS) {                                           \
            fprintf(stderr, "mpi_build: %s failed: %d\n", #call, err_);     \
            return 1;                                                       \
        }                                                                   \
    } while (0)

int main(void) {
    const char *rank = getenv("PMI_RANK");
    if (!rank) rank = "0";
    const char *src =
        "__kernel void scale(__global float *x, float a) {\n"
        "  size_t i = get_global_id(0); x[i] *= a; }\n"
        "__kernel void add(__global float *x, __global const float *y) {\n"
        "  size_t i = get_global_id(0); x[i] += y[i]; }\n";
    cl_platform_id platform;
    cl_device_id device;
    cl_int err;
    CHECK(clGetPlatformIDs(1, &platform, NULL));
    CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
    cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    CHECK(err);
    const char *srcs[] = {src};
    cl_program prog = clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &device, "-cl-fast-relaxed-math", NULL, NULL));
    size_t size = 0;
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL));
    unsigned char *bin = malloc(size ? size : 1);
    unsigned char *bins[] = {bin};
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL));
    printf("rank %s: binary of %zu bytes\n", rank, size);
    free(bin);
    clReleaseProgram(prog);
    clReleaseContext(ctx);
    return 0;
}
