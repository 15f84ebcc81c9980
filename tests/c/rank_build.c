/* One MPI rank that builds, queries and launches as a generated code does, for the
 * "compiling and waiting" tests (tests/cli/ranks.rs). Started by mpiexec (it needs no MPI
 * library: the launcher's variables name the rank and the size). The kernel's text bakes
 * in a size that depends on the rank count and the rank, as shapes baked into generated
 * kernels do, so the sources differ between ranks and between runs of different sizes
 * while the kernel name stays `scale`. It builds the program, asks for
 * CL_PROGRAM_BINARY_SIZES (pocl compiles again there), then launches the kernel once and
 * waits (pocl compiles the size-specialised kernel on a worker thread). Run it with
 * POCL_KERNEL_CACHE=0 so that each rank really compiles.
 * Prints `rank R: ok`; any OpenCL error prints the call and its name and exits 1. */
#include "cltest.h"

static int env_int(const char *a, const char *b) {
    const char *v = getenv(a);
    if (!v) v = getenv(b);
    return v ? atoi(v) : 0;
}

int main(void) {
    int rank = env_int("PMI_RANK", "OMPI_COMM_WORLD_RANK");
    int size = env_int("PMI_SIZE", "OMPI_COMM_WORLD_SIZE");
    char src[512];
    snprintf(src, sizeof src,
             "#define LOCAL_N %d\n"
             "__kernel void scale(__global float *x, float a) {\n"
             "  size_t i = get_global_id(0); if (i < LOCAL_N) x[i] *= a; }\n",
             1000 * size + rank);
    cl_platform_id platform;
    cl_device_id device;
    cl_int err;
    CHECK(clGetPlatformIDs(1, &platform, NULL));
    CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
    cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
    CHECK(err);
    const char *srcs[] = {src};
    cl_program prog = clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &device, NULL, NULL, NULL));
    size_t binary_size = 0;
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof binary_size, &binary_size, NULL));
    cl_kernel k = clCreateKernel(prog, "scale", &err);
    CHECK(err);
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 256 * sizeof(float), NULL, &err);
    CHECK(err);
    float a = 2.0f;
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    CHECK(clSetKernelArg(k, 1, sizeof a, &a));
    size_t global = 256, local = 16;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL));
    CHECK(clFinish(q));
    printf("rank %d: ok\n", rank);
    clReleaseMemObject(buf);
    clReleaseKernel(k);
    clReleaseProgram(prog);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
