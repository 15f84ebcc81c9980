/* clCompileProgram of two sources, the first including an input header given through
 * input_headers/header_include_names, then clLinkProgram of both and a kernel run.
 * Flags: --seed=N, --no-run. */
#include "cltest.h"

int main(int argc, char **argv) {
    const char *seed = arg_value(argc, argv, "--seed");
    char header[256];
    snprintf(header, sizeof header, "#define OFFSET %s\nint helper(int x);\n", seed ? seed : "5");
    const char *kernel_src =
        "#include \"offset.h\"\n"
        "__kernel void linked(__global int *out) {\n"
        "    int i = get_global_id(0);\n"
        "    out[i] = helper(i) + OFFSET;\n"
        "}\n";
    const char *helper_src = "int helper(int x) { return 10 * x; }\n";
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    cl_int err;
    const char *hs[] = {header};
    cl_program hdr = clCreateProgramWithSource(ctx, 1, hs, NULL, &err);
    CHECK(err);
    const char *ks[] = {kernel_src};
    cl_program a = clCreateProgramWithSource(ctx, 1, ks, NULL, &err);
    CHECK(err);
    const char *names[] = {"offset.h"};
    CHECK(clCompileProgram(a, 1, &dev, "-cl-std=CL1.2", 1, &hdr, names, NULL, NULL));
    printf("compiled a\n");
    const char *hps[] = {helper_src};
    cl_program b = clCreateProgramWithSource(ctx, 1, hps, NULL, &err);
    CHECK(err);
    CHECK(clCompileProgram(b, 1, &dev, "-cl-std=CL1.2", 0, NULL, NULL, NULL, NULL));
    printf("compiled b\n");
    cl_program inputs[] = {a, b};
    cl_program linked = clLinkProgram(ctx, 1, &dev, NULL, 2, inputs, NULL, NULL, &err);
    CHECK(err);
    printf("linked\n");
    if (!has_arg(argc, argv, "--no-run")) run_int_kernel(ctx, dev, linked, "linked", 8, "linked");
    CHECK(clReleaseProgram(linked));
    CHECK(clReleaseProgram(a));
    CHECK(clReleaseProgram(b));
    CHECK(clReleaseProgram(hdr));
    CHECK(clReleaseContext(ctx));
    printf("ok\n");
    return 0;
}
