/* A client that asks a program's binary sizes from inside its build callback (pocl calls
 * it before clBuildProgram returns) and its binaries after the build returned, into a
 * buffer of exactly the size the callback was told, followed by 64 guard bytes: prints
 * both sizes and whether the guard bytes were left as they were. An application may do
 * this; what it is handed must fit what it was told. */
#include "cltest.h"

static size_t told;
static int asked;

static void CL_CALLBACK on_built(cl_program prog, void *data) {
    (void)data;
    asked = clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof told, &told, NULL) == CL_SUCCESS;
}

int main(void) {
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    const char *src = "__kernel void twice(__global int *a) { a[get_global_id(0)] *= 2; }\n";
    cl_int err;
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, "-DUNUSED=1", on_built, NULL));
    if (!asked) {
        printf("no size in the callback\n");
        return 1;
    }
    unsigned char *buf = malloc(told + 64);
    memset(buf + told, 0xAB, 64);
    unsigned char *bins[] = {buf};
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL));
    size_t later = 0;
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof later, &later, NULL));
    int intact = 1;
    for (size_t i = 0; i < 64; i++) intact &= buf[told + i] == 0xAB;
    printf("sizes %s, guard bytes %s\n", told == later ? "agree" : "differ",
           intact ? "intact" : "overwritten");
    free(buf);
    CHECK(clReleaseProgram(prog));
    CHECK(clReleaseContext(ctx));
    return intact && told == later ? 0 : 1;
}
