/* A minimal OpenCL loader for testing clshim's layer protocol edges, with the system
 * ocl-icd below it: dlopens libclshim.so (argv[1]) like a loader does, builds a "next"
 * dispatch table from ocl-icd's exported functions in an mmap'd page, and calls the
 * layer entry points directly.
 *   --props=unknown  clInitLayerWithProperties with a property clshim does not know,
 *                    twice (each rc printed), then an unknown clGetLayerInfo query.
 *   --deinit         init (no properties), build + binary query through the layer's
 *                    table, clDeinitLayer, munmap the next table (as a loader frees
 *                    its tables), dlclose the layer, then build once more through the
 *                    table the layer handed out: it must not touch the freed table.
 *   --chain          init, with the next table's clBuildProgram slot set to the global
 *                    clBuildProgram (clshim's own under LD_PRELOAD, printed with the
 *                    library it lives in): one build through the layer then reaches
 *                    clshim a second time, as a call through conda's loader and Apple's
 *                    wrapper ICD reaches the interposed framework on macOS. */
#define _GNU_SOURCE
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define N_ENTRIES 150
#define CL_LAYER_API_VERSION_PARAM 0x4240

typedef cl_int (*init_props_fn)(cl_uint, const void *, cl_uint *, const void ***, const uint64_t *);
typedef cl_int (*deinit_fn)(void);
typedef cl_int (*info_fn)(cl_uint, size_t, void *, size_t *);
typedef cl_program (*create_src_fn)(cl_context, cl_uint, const char **, const size_t *, cl_int *);
typedef cl_int (*build_fn)(cl_program, cl_uint, const cl_device_id *, const char *, void *, void *);
typedef cl_int (*prog_info_fn)(cl_program, cl_uint, size_t, void *, size_t *);

static void *must(void *h, const char *name) {
    void *p = dlsym(h, name);
    if (!p) {
        printf("FAILED dlsym %s\n", name);
        exit(1);
    }
    return p;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        printf("usage: layer_probe LIBCLSHIM --props=unknown|--deinit\n");
        return 2;
    }
    void *shim = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!shim) {
        printf("FAILED dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    void *icd = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!icd) {
        printf("FAILED dlopen libOpenCL.so.1: %s\n", dlerror());
        return 1;
    }
    init_props_fn init = (init_props_fn)must(shim, "clInitLayerWithProperties");
    deinit_fn deinit = (deinit_fn)must(shim, "clDeinitLayer");
    info_fn layer_info = (info_fn)must(shim, "clGetLayerInfo");

    void **next = mmap(NULL, N_ENTRIES * sizeof(void *), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (next == MAP_FAILED) return 1;
    static const struct { int slot; const char *name; } slots[] = {
        {0, "clGetPlatformIDs"}, {1, "clGetPlatformInfo"}, {2, "clGetDeviceIDs"},
        {3, "clGetDeviceInfo"}, {5, "clCreateContext"}, {8, "clGetContextInfo"},
        {26, "clCreateProgramWithSource"}, {27, "clCreateProgramWithBinary"},
        {28, "clRetainProgram"}, {29, "clReleaseProgram"}, {30, "clBuildProgram"},
        {32, "clGetProgramInfo"}, {33, "clGetProgramBuildInfo"},
    };
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
        next[slots[i].slot] = must(icd, slots[i].name);

    cl_uint n_ret = 0;
    const void **table = NULL;
    if (strcmp(argv[2], "--props=unknown") == 0) {
        const uint64_t props[] = {0x4242, 1, 0};
        for (int i = 0; i < 2; i++)
            printf("init: %d\n", init(N_ENTRIES, next, &n_ret, &table, props));
        cl_uint v = 0;
        printf("unknown info: %d\n", layer_info(0x7777, sizeof v, &v, NULL));
        cl_int rc = layer_info(CL_LAYER_API_VERSION_PARAM, sizeof v, &v, NULL);
        printf("version: %d %u\n", rc, v);
        return 0;
    }
    int chain = strcmp(argv[2], "--chain") == 0;
    if (!chain && strcmp(argv[2], "--deinit") != 0) return 2;
    if (chain) {
        next[30] = dlsym(RTLD_DEFAULT, "clBuildProgram");
        Dl_info where;
        printf("next build: %s\n", next[30] && dladdr(next[30], &where) ? where.dli_fname : "?");
    }
    printf("init: %d\n", init(N_ENTRIES, next, &n_ret, &table, NULL));
    printf("entries: %u\n", n_ret);

    cl_platform_id plat;
    cl_device_id dev;
    cl_int err;
    if (clGetPlatformIDs(1, &plat, NULL) || clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL))
        return 1;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    const char *src = "__kernel void k(__global int *o) { o[get_global_id(0)] = 3; }\n";
    create_src_fn create = (create_src_fn)table[26];
    build_fn build = (build_fn)table[30];
    prog_info_fn info = (prog_info_fn)table[32];
    cl_program p = create(ctx, 1, &src, NULL, &err);
    printf("build: %d\n", build(p, 1, &dev, NULL, NULL, NULL));
    size_t size = 0;
    printf("sizes: %d\n", info(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL));
    if (chain) {
        clReleaseProgram(p);
        clReleaseContext(ctx);
        printf("ok\n");
        return 0;
    }

    printf("deinit: %d\n", deinit());
    munmap(next, N_ENTRIES * sizeof(void *));
    dlclose(shim);

    cl_program q = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    printf("late build: %d\n", build(q, 1, &dev, NULL, NULL, NULL));
    clReleaseProgram(q);
    clReleaseProgram(p);
    clReleaseContext(ctx);
    printf("ok\n");
    return 0;
}
