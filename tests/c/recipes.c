/* Program binaries of every kind, saved and loaded back in one process, as binary-caching
 * clients and the OpenCL CTS (test_compiler: execute_after_serialize_reload_object,
 * program_binary_type) do. Prints each CL_PROGRAM_BINARY_TYPE it meets and the kernel
 * results, so a run under clshim can be compared line by line with one without it.
 *   recipes options   build with -DVAL=7, reload, build with NULL options, run
 *   recipes refused   build with -DVAL=7; while a kernel holds the program, a rebuild with
 *                     -DVAL=9 and a callback (refused); then reload, build, run
 *   recipes object    compile (with an embedded header), reload, link, run
 *   recipes library   compile, link -create-library, reload, link with a kernel, run
 *   recipes linked    compile + link an executable, reload, build, run
 *   recipes chain     the CTS program_binary_type chain: compile, reload, make a library
 *                     of the reloaded object, reload it, link it with another object,
 *                     reload the executable, build it, run both kernels
 *   recipes il        an IL program (skipped, printing "il: unsupported", without IL)
 *   recipes again     an executable and a linked executable reloaded and built, their
 *                     binaries taken again and reloaded again; an object reloaded, linked;
 *                     a library reloaded and built, its binary taken again
 *   recipes bytes DIR a build with "-I DIR/lat\xe9" (Latin-1, made here) and an object
 *                     with an embedded header named "h\xe9.h": reloaded, built, run
 *   recipes deep N    a library chain N deep, linked into an executable, reloaded, run
 *   recipes shared W D W objects, then D levels of W libraries each linking the W before,
 *                     an executable of them all: prints its binary's size, reloads it
 *   recipes vtab      a library linked with "-create-library\v", reloaded, linked, run
 *   recipes load FILE try to load FILE as a binary; prints the error and binary_status
 * --save=FILE (object, options) writes the first binary taken to FILE. */
#include "cltest.h"
#include <sys/stat.h>

static const char *type_name(cl_program_binary_type t) {
    switch (t) {
    case CL_PROGRAM_BINARY_TYPE_NONE: return "NONE";
    case CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT: return "COMPILED_OBJECT";
    case CL_PROGRAM_BINARY_TYPE_LIBRARY: return "LIBRARY";
    case CL_PROGRAM_BINARY_TYPE_EXECUTABLE: return "EXECUTABLE";
    default: return "?";
    }
}

static void print_type(cl_program p, cl_device_id dev, const char *label) {
    cl_program_binary_type t = 0xffff;
    CHECK(clGetProgramBuildInfo(p, dev, CL_PROGRAM_BINARY_TYPE, sizeof t, &t, NULL));
    printf("%s type=%s\n", label, type_name(t));
}

/* The program's binary for its one device (malloc'd); writes it to `save` if given. */
static unsigned char *take_binary(cl_program p, size_t *len, const char *save) {
    CHECK(clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof *len, len, NULL));
    unsigned char *bin = malloc(*len ? *len : 1);
    unsigned char *bins[] = {bin};
    CHECK(clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL));
    if (save) {
        FILE *f = fopen(save, "wb");
        if (!f || fwrite(bin, 1, *len, f) != *len) exit(2);
        fclose(f);
    }
    return bin;
}

static cl_program reload(cl_context ctx, cl_device_id dev, const unsigned char *bin, size_t len) {
    cl_int status = 1, err;
    cl_program p = clCreateProgramWithBinary(ctx, 1, &dev, &len, &bin, &status, &err);
    CHECK(err);
    CHECK(status);
    return p;
}

static void CL_CALLBACK notified(cl_program p, void *data) {
    (void)p;
    ++*(int *)data;
}

static cl_program source(cl_context ctx, const char *src) {
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    return p;
}

static const char *KERNEL =
    "#include \"offset.h\"\n"
    "int helper(int x);\n"
    "__kernel void linked(__global int *out) {\n"
    "    int i = get_global_id(0);\n"
    "    out[i] = helper(i) + OFFSET;\n"
    "}\n";
static const char *HELPER = "int helper(int x) { return SCALE * x; }\n";

static cl_program compile_kernel(cl_context ctx, cl_device_id dev) {
    cl_program hdr = source(ctx, "#define OFFSET 5\n");
    cl_program a = source(ctx, KERNEL);
    const char *names[] = {"offset.h"};
    CHECK(clCompileProgram(a, 1, &dev, "-cl-std=CL1.2", 1, &hdr, names, NULL, NULL));
    CHECK(clReleaseProgram(hdr));
    return a;
}

static cl_program compile_helper(cl_context ctx, cl_device_id dev) {
    cl_program b = source(ctx, HELPER);
    CHECK(clCompileProgram(b, 1, &dev, "-DSCALE=10", 0, NULL, NULL, NULL, NULL));
    return b;
}

static cl_program link2(cl_context ctx, cl_device_id dev, cl_program a, cl_program b,
                        const char *options) {
    cl_int err;
    cl_program in[] = {a, b};
    cl_program p = clLinkProgram(ctx, 1, &dev, options, b ? 2 : 1, in, NULL, NULL, &err);
    CHECK(err);
    return p;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *mode = argv[1];
    const char *save = arg_value(argc, argv, "--save");
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    size_t len = 0;
    if (!strcmp(mode, "options")) {
        cl_program p = source(ctx,
                              "#ifndef VAL\n#define VAL 1\n#endif\n"
                              "__kernel void val(__global int *out) { out[get_global_id(0)] = VAL; }\n");
        build_or_die(p, dev, "-DVAL=7");
        print_type(p, dev, "built");
        unsigned char *bin = take_binary(p, &len, save);
        cl_program r = reload(ctx, dev, bin, len);
        print_type(r, dev, "reloaded");
        build_or_die(r, dev, NULL);
        print_type(r, dev, "rebuilt");
        run_int_kernel(ctx, dev, r, "val", 4, "val");
        CHECK(clReleaseProgram(r));
        CHECK(clReleaseProgram(p));
        free(bin);
    } else if (!strcmp(mode, "refused")) {
        cl_program p = source(ctx,
                              "#ifndef VAL\n#define VAL 1\n#endif\n"
                              "__kernel void val(__global int *out) { out[get_global_id(0)] = VAL; }\n");
        build_or_die(p, dev, "-DVAL=7");
        cl_int err;
        cl_kernel k = clCreateKernel(p, "val", &err);
        CHECK(err);
        int calls = 0;
        err = clBuildProgram(p, 1, &dev, "-DVAL=9", notified, &calls);
        printf("rebuild while a kernel holds it: %s\n", cl_err_name(err));
        CHECK(clReleaseKernel(k));
        unsigned char *bin = take_binary(p, &len, save);
        cl_program r = reload(ctx, dev, bin, len);
        build_or_die(r, dev, NULL);
        run_int_kernel(ctx, dev, r, "val", 4, "val");
        CHECK(clReleaseProgram(r));
        CHECK(clReleaseProgram(p));
        free(bin);
    } else if (!strcmp(mode, "object")) {
        cl_program a = compile_kernel(ctx, dev);
        print_type(a, dev, "compiled");
        unsigned char *bin = take_binary(a, &len, save);
        cl_program r = reload(ctx, dev, bin, len);
        print_type(r, dev, "reloaded");
        cl_program b = compile_helper(ctx, dev);
        cl_program exe = link2(ctx, dev, r, b, NULL);
        print_type(exe, dev, "linked");
        run_int_kernel(ctx, dev, exe, "linked", 4, "linked");
        CHECK(clReleaseProgram(exe));
        CHECK(clReleaseProgram(b));
        CHECK(clReleaseProgram(r));
        CHECK(clReleaseProgram(a));
        free(bin);
    } else if (!strcmp(mode, "library")) {
        cl_program b = compile_helper(ctx, dev);
        cl_program lib = link2(ctx, dev, b, NULL, "-create-library");
        print_type(lib, dev, "library");
        unsigned char *bin = take_binary(lib, &len, save);
        cl_program r = reload(ctx, dev, bin, len);
        print_type(r, dev, "reloaded");
        cl_program a = compile_kernel(ctx, dev);
        cl_program exe = link2(ctx, dev, a, r, NULL);
        print_type(exe, dev, "linked");
        run_int_kernel(ctx, dev, exe, "linked", 4, "linked");
        CHECK(clReleaseProgram(exe));
        CHECK(clReleaseProgram(a));
        CHECK(clReleaseProgram(r));
        CHECK(clReleaseProgram(lib));
        CHECK(clReleaseProgram(b));
        free(bin);
    } else if (!strcmp(mode, "linked")) {
        cl_program a = compile_kernel(ctx, dev);
        cl_program b = compile_helper(ctx, dev);
        cl_program exe = link2(ctx, dev, a, b, NULL);
        CHECK(clReleaseProgram(a));
        CHECK(clReleaseProgram(b));
        print_type(exe, dev, "linked");
        unsigned char *bin = take_binary(exe, &len, save);
        cl_program r = reload(ctx, dev, bin, len);
        print_type(r, dev, "reloaded");
        build_or_die(r, dev, NULL);
        print_type(r, dev, "rebuilt");
        run_int_kernel(ctx, dev, r, "linked", 4, "linked");
        CHECK(clReleaseProgram(r));
        CHECK(clReleaseProgram(exe));
        free(bin);
    } else if (!strcmp(mode, "chain")) {
        cl_program b = compile_helper(ctx, dev);
        print_type(b, dev, "compiled");
        unsigned char *bin = take_binary(b, &len, NULL);
        cl_program rb = reload(ctx, dev, bin, len);
        print_type(rb, dev, "reloaded object");
        free(bin);
        cl_program lib = link2(ctx, dev, rb, NULL, "-create-library");
        print_type(lib, dev, "library of the reloaded object");
        bin = take_binary(lib, &len, NULL);
        cl_program rlib = reload(ctx, dev, bin, len);
        print_type(rlib, dev, "reloaded library");
        free(bin);
        cl_program a = compile_kernel(ctx, dev);
        cl_program exe = link2(ctx, dev, a, rlib, "");
        print_type(exe, dev, "linked");
        bin = take_binary(exe, &len, NULL);
        cl_program rexe = reload(ctx, dev, bin, len);
        print_type(rexe, dev, "reloaded executable");
        free(bin);
        build_or_die(rexe, dev, NULL);
        print_type(rexe, dev, "built");
        run_int_kernel(ctx, dev, rexe, "linked", 4, "linked");
        cl_program all[] = {rexe, exe, a, rlib, lib, rb, b};
        for (int i = 0; i < 7; i++) CHECK(clReleaseProgram(all[i]));
    } else if (!strcmp(mode, "il")) {
        char il[256] = "";
        size_t n = 0;
        if (clGetDeviceInfo(dev, CL_DEVICE_IL_VERSION, sizeof il, il, &n) != CL_SUCCESS || n <= 1) {
            printf("il: unsupported\n");
        } else {
            printf("il: %s (no IL round trip written)\n", il);
        }
    } else if (!strcmp(mode, "again")) {
        /* Each reloaded program, re-built the way an application would, answers its next
         * binary query with a binary that reloads again. */
        cl_program p = source(ctx, "__kernel void val(__global int *out) { out[get_global_id(0)] = VAL; }\n");
        build_or_die(p, dev, "-DVAL=7");
        unsigned char *bin = take_binary(p, &len, NULL);
        cl_program r = reload(ctx, dev, bin, len);
        free(bin);
        build_or_die(r, dev, NULL);
        bin = take_binary(r, &len, NULL);
        cl_program r2 = reload(ctx, dev, bin, len);
        free(bin);
        build_or_die(r2, dev, NULL);
        run_int_kernel(ctx, dev, r2, "val", 4, "executable again");
        cl_program a = compile_kernel(ctx, dev);
        bin = take_binary(a, &len, NULL);
        cl_program ra = reload(ctx, dev, bin, len);
        free(bin);
        cl_program b = compile_helper(ctx, dev);
        cl_program exe = link2(ctx, dev, ra, b, NULL);
        bin = take_binary(exe, &len, NULL);
        cl_program rexe = reload(ctx, dev, bin, len);
        free(bin);
        build_or_die(rexe, dev, NULL);
        print_type(rexe, dev, "relinked");
        bin = take_binary(rexe, &len, NULL);
        cl_program rexe2 = reload(ctx, dev, bin, len);
        free(bin);
        build_or_die(rexe2, dev, NULL);
        print_type(rexe2, dev, "relinked again");
        run_int_kernel(ctx, dev, rexe2, "linked", 4, "linked again");
        cl_program lb = compile_helper(ctx, dev);
        cl_program lib = link2(ctx, dev, lb, NULL, "-create-library");
        bin = take_binary(lib, &len, NULL);
        cl_program rl = reload(ctx, dev, bin, len);
        free(bin);
        build_or_die(rl, dev, NULL);
        bin = take_binary(rl, &len, NULL);
        printf("library reloaded and built: binary taken\n");
        free(bin);
        cl_program all[] = {rl, lib, lb, rexe2, rexe, exe, b, ra, a, r2, r, p};
        for (int i = 0; i < 12; i++) CHECK(clReleaseProgram(all[i]));
    } else if (!strcmp(mode, "bytes") && argc > 2) {
        char dir[4096], file[4200], opts[4200];
        snprintf(dir, sizeof dir, "%s/lat\xe9", argv[2]);
        mkdir(dir, 0700);
        snprintf(file, sizeof file, "%s/inc.h", dir);
        FILE *f = fopen(file, "w");
        if (!f) return 2;
        fputs("#define INC 3\n", f);
        fclose(f);
        snprintf(opts, sizeof opts, "-I%s", dir);
        cl_program p = source(ctx, "#include \"inc.h\"\n"
                                   "__kernel void val(__global int *out) { out[get_global_id(0)] = INC; }\n");
        build_or_die(p, dev, opts);
        unsigned char *bin = take_binary(p, &len, NULL);
        cl_program r = reload(ctx, dev, bin, len);
        free(bin);
        build_or_die(r, dev, NULL);
        run_int_kernel(ctx, dev, r, "val", 4, "latin-1 -I");
        cl_program hdr = source(ctx, "#define OFFSET 5\n");
        cl_program a = source(ctx, "#include \"h\xe9.h\"\n"
                                   "int helper(int x);\n"
                                   "__kernel void linked(__global int *out) {\n"
                                   "    int i = get_global_id(0);\n"
                                   "    out[i] = helper(i) + OFFSET;\n"
                                   "}\n");
        const char *names[] = {"h\xe9.h"};
        CHECK(clCompileProgram(a, 1, &dev, "", 1, &hdr, names, NULL, NULL));
        bin = take_binary(a, &len, NULL);
        cl_program ra = reload(ctx, dev, bin, len);
        free(bin);
        cl_program b = compile_helper(ctx, dev);
        cl_program exe = link2(ctx, dev, ra, b, NULL);
        run_int_kernel(ctx, dev, exe, "linked", 4, "latin-1 header");
        cl_program all[] = {exe, b, ra, a, hdr, r, p};
        for (int i = 0; i < 7; i++) CHECK(clReleaseProgram(all[i]));
    } else if (!strcmp(mode, "deep") && argc > 2) {
        int n = atoi(argv[2]);
        cl_program lib = compile_helper(ctx, dev);
        for (int i = 0; i < n; i++) {
            cl_program next = link2(ctx, dev, lib, NULL, "-create-library");
            CHECK(clReleaseProgram(lib));
            lib = next;
        }
        cl_program a = compile_kernel(ctx, dev);
        cl_program exe = link2(ctx, dev, a, lib, NULL);
        unsigned char *bin = take_binary(exe, &len, NULL);
        cl_program r = reload(ctx, dev, bin, len);
        free(bin);
        build_or_die(r, dev, NULL);
        run_int_kernel(ctx, dev, r, "linked", 4, "deep");
        cl_program all[] = {r, exe, a, lib};
        for (int i = 0; i < 4; i++) CHECK(clReleaseProgram(all[i]));
    } else if (!strcmp(mode, "shared") && argc > 3) {
        int w = atoi(argv[2]), d = atoi(argv[3]);
        cl_program level[64], next[64];
        if (w < 1 || w > 64) return 2;
        for (int i = 0; i < w; i++) {
            char src[128];
            snprintf(src, sizeof src, "int f%d(int x) { return x + %d; }\n", i, i);
            level[i] = source(ctx, src);
            CHECK(clCompileProgram(level[i], 1, &dev, "", 0, NULL, NULL, NULL, NULL));
        }
        for (int k = 0; k < d; k++) {
            for (int i = 0; i < w; i++) {
                cl_int err;
                next[i] = clLinkProgram(ctx, 1, &dev, "-create-library", (cl_uint)w, level, NULL,
                                        NULL, &err);
                CHECK(err);
            }
            for (int i = 0; i < w; i++) {
                CHECK(clReleaseProgram(level[i]));
                level[i] = next[i];
            }
        }
        cl_int err;
        cl_program exe = clLinkProgram(ctx, 1, &dev, "", (cl_uint)w, level, NULL, NULL, &err);
        CHECK(err);
        unsigned char *bin = take_binary(exe, &len, NULL);
        printf("shared: binary %zu bytes\n", len);
        cl_program r = reload(ctx, dev, bin, len);
        free(bin);
        printf("shared: reloaded\n");
        CHECK(clReleaseProgram(r));
        CHECK(clReleaseProgram(exe));
        for (int i = 0; i < w; i++) CHECK(clReleaseProgram(level[i]));
    } else if (!strcmp(mode, "vtab")) {
        cl_program b = compile_helper(ctx, dev);
        cl_program lib = link2(ctx, dev, b, NULL, "-create-library\v");
        print_type(lib, dev, "library");
        unsigned char *bin = take_binary(lib, &len, save);
        cl_program r = reload(ctx, dev, bin, len);
        free(bin);
        print_type(r, dev, "reloaded");
        cl_program a = compile_kernel(ctx, dev);
        cl_program exe = link2(ctx, dev, a, r, NULL);
        run_int_kernel(ctx, dev, exe, "linked", 4, "linked");
        cl_program all[] = {exe, a, r, lib, b};
        for (int i = 0; i < 5; i++) CHECK(clReleaseProgram(all[i]));
    } else if (!strcmp(mode, "load") && argc > 2) {
        FILE *f = fopen(argv[2], "rb");
        if (!f) return 2;
        static unsigned char buf[1 << 20];
        len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        const unsigned char *bin = buf;
        cl_int status = 1, err = 1;
        cl_program p = clCreateProgramWithBinary(ctx, 1, &dev, &len, &bin, &status, &err);
        printf("load: %s status=%s program=%s\n", cl_err_name(err), cl_err_name(status),
               p ? "yes" : "no");
        if (p) CHECK(clReleaseProgram(p));
    } else {
        return 2;
    }
    CHECK(clReleaseContext(ctx));
    printf("ok\n");
    return 0;
}
