/* A compile+link client that caches its program binary, as binary-caching applications
 * do: compiles a kernel of S statements (its seed constant makes every run's source new)
 * and a helper, links them, queries CL_PROGRAM_BINARY_SIZES and CL_PROGRAM_BINARIES,
 * loads the binary back, builds it and runs the kernel once.
 *   compile_link_query S SEED
 * Prints "result: <sum>" and "ok". Timings come from clshim's trace records. */
#include "../tests/c/cltest.h"

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int stmts = atoi(argv[1]);
    const char *seed = argv[2];
    size_t cap = (size_t)stmts * 64 + 512;
    char *src = malloc(cap);
    size_t at = (size_t)snprintf(src, cap,
                                 "int helper(int x);\n__kernel void big(__global int *out) {\n"
                                 "    int i = get_global_id(0);\n    int v = i + %s;\n",
                                 seed);
    for (int s = 0; s < stmts; s++)
        at += (size_t)snprintf(src + at, cap - at, "    v = v * %d + (v >> %d) + helper(v);\n",
                               s % 7 + 3, s % 5 + 1);
    snprintf(src + at, cap - at, "    out[i] = v;\n}\n");
    const char *helper = "int helper(int x) { return x ^ (x >> 3); }\n";
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    cl_int err;
    const char *s1[] = {src}, *s2[] = {helper};
    cl_program a = clCreateProgramWithSource(ctx, 1, s1, NULL, &err);
    CHECK(err);
    cl_program b = clCreateProgramWithSource(ctx, 1, s2, NULL, &err);
    CHECK(err);
    CHECK(clCompileProgram(a, 1, &dev, "-cl-std=CL1.2", 0, NULL, NULL, NULL, NULL));
    CHECK(clCompileProgram(b, 1, &dev, "-cl-std=CL1.2", 0, NULL, NULL, NULL, NULL));
    cl_program in[] = {a, b};
    cl_program exe = clLinkProgram(ctx, 1, &dev, NULL, 2, in, NULL, NULL, &err);
    CHECK(err);
    size_t len = 0;
    CHECK(clGetProgramInfo(exe, CL_PROGRAM_BINARY_SIZES, sizeof len, &len, NULL));
    unsigned char *bin = malloc(len);
    unsigned char *bins[] = {bin};
    CHECK(clGetProgramInfo(exe, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL));
    const unsigned char *cbin = bin;
    cl_int status;
    cl_program r = clCreateProgramWithBinary(ctx, 1, &dev, &len, &cbin, &status, &err);
    CHECK(err);
    build_or_die(r, dev, NULL);
    long sum = run_int_kernel(ctx, dev, r, "big", 4, "big");
    printf("result: %ld\nok\n", sum);
    return 0;
}
