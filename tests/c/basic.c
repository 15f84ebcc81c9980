/* Build from source, query the binary sizes (size-only first, then the value) and the
 * binaries, then run the kernel and print its output.
 * Flags: --no-query (skip the binary queries), --sizes-only (only the size-only query),
 *        --no-binaries (stop after CL_PROGRAM_BINARY_SIZES), --no-run, --seed=N. */
#include "cltest.h"

int main(int argc, char **argv) {
    const char *seed = arg_value(argc, argv, "--seed");
    char src[512];
    snprintf(src, sizeof src,
             "__kernel void square(__global int *out) {\n"
             "    int i = get_global_id(0);\n"
             "    out[i] = i * i + %s;\n"
             "}\n",
             seed ? seed : "7");
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    cl_int err;
    const char *srcs[] = {src};
    cl_program prog = clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
    CHECK(err);
    build_or_die(prog, dev, "-cl-std=CL1.2");
    printf("built\n");

    if (!has_arg(argc, argv, "--no-query")) {
        size_t ret = 0;
        CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, 0, NULL, &ret));
        printf("binary_sizes size-only: %zu device(s)\n", ret / sizeof(size_t));
        if (!has_arg(argc, argv, "--sizes-only")) {
            size_t size = 0;
            CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, &ret));
            printf("binary_sizes: %s\n", size ? "nonzero" : "zero");
            if (!has_arg(argc, argv, "--no-binaries")) {
                unsigned char *bin = malloc(size ? size : 1);
                unsigned char *bins[] = {bin};
                CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL));
                printf("binaries: read %s\n", size ? "nonzero" : "zero");
                free(bin);
            }
        }
    }
    if (!has_arg(argc, argv, "--no-run")) run_int_kernel(ctx, dev, prog, "square", 8, "square");
    CHECK(clReleaseProgram(prog));
    CHECK(clReleaseContext(ctx));
    printf("ok\n");
    return 0;
}
