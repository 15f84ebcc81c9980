/* What an application can ask of programs built from source, printed as one transcript
 * (handles and addresses never printed, only whether they are the same): for the program
 * cache's tests, whose answers must be those of a run without clshim, served or not.
 * Modes (argv[1]):
 *   api      one program, built with options and a callback: every clGetProgramInfo and
 *            clGetProgramBuildInfo answer before and after the build, builds the driver
 *            refuses for their arguments (and the program after each), ten rebuilds
 *            (which keep one program: the context's references), reference counts
 *            through retain/release and kernels, CL_KERNEL_PROGRAM, kernel argument
 *            names, clCreateKernelsInProgram with each kernel's attributes, rebuilds
 *            refused while a kernel holds the program, a rebuild with other options, a
 *            kernel that outlives its program's last release (its program's source,
 *            and the program taken back from it and built again), the program as a
 *            compile header and a link input (the linked program's rebuild refused
 *            while a kernel holds it), a build that fails, and how many builds it
 *            asked for;
 *   threads  N threads (--threads=N, default 8) each make and build the same source in
 *            one context, concurrently, and run it;
 *   fork     builds a program, then forks 20 times while a thread keeps building: each
 *            child retains, queries and releases the program it inherited (pocl runs no
 *            kernel after a fork, with or without clshim); the parent then runs it;
 *   platforms  one source on the first device of every platform (pocl and Intel's CPU
 *            runtime under the Khronos loader): built, run, its source and its kernel's
 *            program, and Intel's clGetDeviceGlobalVariablePointerINTEL on it where the
 *            platform offers that extension function.
 * Every mode ends with "ok". --seed=N changes the sources' constants. */
#define _GNU_SOURCE
#include "cltest.h"
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

static int seed = 0;

static void source_of(char *buf, size_t n, int k) {
    snprintf(buf, n,
             "#warning \"program_api: a warning for the build log\"\n"
             "__kernel __attribute__((vec_type_hint(int4)))\n"
             "void scale(__global int *out, int by) {\n"
             "    int i = get_global_id(0);\n"
             "    out[i] = (i + %d) * by * FACTOR;\n"
             "}\n"
             "__kernel __attribute__((reqd_work_group_size(1, 1, 1)))\n"
             "void second(__global int *out) { out[get_global_id(0)] = %d; }\n",
             k + seed, 7 + seed);
}

static void info_text(cl_program p, cl_program_info what, const char *name) {
    char buf[8192];
    size_t n = 0;
    cl_int e = clGetProgramInfo(p, what, sizeof buf, buf, &n);
    printf("  %s: %s", name, cl_err_name(e));
    if (e == CL_SUCCESS) printf(" [%.*s] (%zu bytes)", (int)(n ? n - 1 : 0), buf, n);
    printf("\n");
}

static cl_uint refcount(cl_program p) {
    cl_uint rc = 0;
    CHECK(clGetProgramInfo(p, CL_PROGRAM_REFERENCE_COUNT, sizeof rc, &rc, NULL));
    return rc;
}

static void build_info(cl_program p, cl_device_id d, const char *when) {
    cl_build_status st = 99;
    cl_program_binary_type t = 99;
    char opts[1024] = "", log[8192] = "";
    size_t log_len = 0;
    cl_int e1 = clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_STATUS, sizeof st, &st, NULL);
    cl_int e2 = clGetProgramBuildInfo(p, d, CL_PROGRAM_BINARY_TYPE, sizeof t, &t, NULL);
    cl_int e3 = clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_OPTIONS, sizeof opts, opts, NULL);
    cl_int e4 = clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, sizeof log, log, &log_len);
    /* The log names pocl's temporary file, the same for a build from pocl's kernel cache. */
    printf("  %s: status %s %d, binary type %s %u, options %s [%s], log %s (%zu bytes) [%s]\n",
           when, cl_err_name(e1), (int)st, cl_err_name(e2), (unsigned)t, cl_err_name(e3), opts,
           cl_err_name(e4), log_len, e4 == CL_SUCCESS ? log : "");
}

static void program_info(cl_program p, cl_context ctx, cl_device_id dev, const char *when) {
    printf("%s:\n", when);
    cl_context c = NULL;
    CHECK(clGetProgramInfo(p, CL_PROGRAM_CONTEXT, sizeof c, &c, NULL));
    cl_uint nd = 0;
    CHECK(clGetProgramInfo(p, CL_PROGRAM_NUM_DEVICES, sizeof nd, &nd, NULL));
    cl_device_id d = NULL;
    CHECK(clGetProgramInfo(p, CL_PROGRAM_DEVICES, sizeof d, &d, NULL));
    printf("  context same %d, devices %u, device same %d, references %u\n", c == ctx, nd,
           d == dev, refcount(p));
    info_text(p, CL_PROGRAM_SOURCE, "source");
    size_t nk = 0;
    cl_int e = clGetProgramInfo(p, CL_PROGRAM_NUM_KERNELS, sizeof nk, &nk, NULL);
    printf("  kernels: %s %zu\n", cl_err_name(e), e == CL_SUCCESS ? nk : 0);
    info_text(p, CL_PROGRAM_KERNEL_NAMES, "kernel names");
    size_t size = 0;
    e = clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, 0, NULL, &size);
    printf("  binary sizes (size only): %s %zu\n", cl_err_name(e), size);
    build_info(p, dev, "build");
}

static void on_built(cl_program p, void *data) {
    cl_program *expected = data;
    printf("  callback: program same %d\n", p == *expected);
}

/* Every clBuildProgram of the api mode, counted: each must leave a record, refused or not. */
static int build_calls = 0;

static cl_int build(cl_program p, cl_uint n, const cl_device_id *devs, const char *opts,
                    void(CL_CALLBACK *notify)(cl_program, void *), void *data) {
    build_calls++;
    return clBuildProgram(p, n, devs, opts, notify, data);
}

/* Builds of a built program that the driver refuses for their arguments, in the order
 * the OpenCL specification lists the checks: each answered as the driver answers (pocl
 * calls the callback of a refused build too) and leaving the program as it was; then
 * options the driver refuses, which leave the build failed, and the build again. */
static void argument_checks(cl_program p, cl_device_id dev) {
    const char *opts = "-DFACTOR=2 -cl-kernel-arg-info";
    int marker = 0;
    printf("argument checks:\n");
    cl_int err = build(p, 1, &dev, opts, NULL, &marker);
    printf("  user data without a callback: %s\n", cl_err_name(err));
    err = build(p, 0, &dev, opts, on_built, &p);
    printf("  a device list with no count: %s\n", cl_err_name(err));
    err = build(p, 1, NULL, opts, on_built, &p);
    printf("  a count with no device list: %s\n", cl_err_name(err));
    build_info(p, dev, "after the refused builds");
    err = build(p, 1, &dev, "-DFACTOR=2 -cl-no-such-option", on_built, &p);
    printf("  options the driver refuses: %s\n", cl_err_name(err));
    build_info(p, dev, "after the refused options");
    size_t nk = 0;
    err = clGetProgramInfo(p, CL_PROGRAM_NUM_KERNELS, sizeof nk, &nk, NULL);
    printf("  kernels: %s %zu\n", cl_err_name(err), err == CL_SUCCESS ? nk : 0);
    err = build(p, 1, &dev, opts, NULL, NULL);
    printf("  built again: %s\n", cl_err_name(err));
    build_info(p, dev, "built again");
}

static cl_uint context_refcount(cl_context ctx) {
    cl_uint rc = 0;
    CHECK(clGetContextInfo(ctx, CL_CONTEXT_REFERENCE_COUNT, sizeof rc, &rc, NULL));
    return rc;
}

/* Rebuilds of one program keep one program alive: each program holds a reference to its
 * context (in pocl), so the context's count does not grow with them. */
static void rebuilds(cl_program p, cl_context ctx, cl_device_id dev) {
    cl_uint before = context_refcount(ctx);
    for (int i = 0; i < 10; i++)
        CHECK(build(p, 1, &dev, "-DFACTOR=2 -cl-kernel-arg-info", NULL, NULL));
    printf("10 rebuilds: context references grew by %d\n",
           (int)context_refcount(ctx) - (int)before);
}

static int run_scale(cl_context ctx, cl_device_id dev, cl_kernel k) {
    cl_int err;
    size_t n = 4;
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, n * sizeof(cl_int), NULL, &err);
    CHECK(err);
    int by = 3;
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    CHECK(clSetKernelArg(k, 1, sizeof by, &by));
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    CHECK(err);
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &n, NULL, 0, NULL, NULL));
    cl_int out[4];
    CHECK(clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    CHECK(clReleaseCommandQueue(q));
    CHECK(clReleaseMemObject(buf));
    return out[0] + 10 * out[1] + 100 * out[2] + 1000 * out[3];
}

static void arg_names(cl_kernel k) {
    char name[64] = "", type[64] = "";
    cl_int e1 = clGetKernelArgInfo(k, 0, CL_KERNEL_ARG_NAME, sizeof name, name, NULL);
    cl_int e2 = clGetKernelArgInfo(k, 1, CL_KERNEL_ARG_TYPE_NAME, sizeof type, type, NULL);
    printf("  argument 0 name %s [%s], argument 1 type %s [%s]\n", cl_err_name(e1),
           e1 == CL_SUCCESS ? name : "", cl_err_name(e2), e2 == CL_SUCCESS ? type : "");
}

static void api(cl_context ctx, cl_device_id dev) {
    char src[1024];
    source_of(src, sizeof src, 1);
    const char *srcs[] = {src};
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
    CHECK(err);
    program_info(p, ctx, dev, "created");
    CHECK(clRetainProgram(p));
    printf("retained: references %u\n", refcount(p));
    CHECK(clReleaseProgram(p));
    cl_kernel early = clCreateKernel(p, "scale", &err);
    printf("kernel before the build: %s\n", cl_err_name(err));
    if (early) clReleaseKernel(early);
    printf("build:\n");
    err = build(p, 1, &dev, "-DFACTOR=2 -cl-kernel-arg-info", on_built, &p);
    printf("  result %s\n", cl_err_name(err));
    program_info(p, ctx, dev, "built");
    argument_checks(p, dev);
    rebuilds(p, ctx, dev);
    cl_kernel k = clCreateKernel(p, "scale", &err);
    CHECK(err);
    printf("kernel: references %u\n", refcount(p));
    cl_program kp = NULL;
    CHECK(clGetKernelInfo(k, CL_KERNEL_PROGRAM, sizeof kp, &kp, NULL));
    size_t kp_size = 0;
    CHECK(clGetKernelInfo(k, CL_KERNEL_PROGRAM, 0, NULL, &kp_size));
    printf("  kernel's program same %d (%zu bytes)\n", kp == p, kp_size);
    arg_names(k);
    printf("  scale: %d\n", run_scale(ctx, dev, k));
    cl_kernel all[4];
    cl_uint got = 0;
    err = clCreateKernelsInProgram(p, 4, all, &got);
    printf("kernels in program: %s %u\n", cl_err_name(err), got);
    for (cl_uint i = 0; i < got; i++) {
        char name[64] = "", attrs[256] = "";
        size_t attrs_size = 0;
        CHECK(clGetKernelInfo(all[i], CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL));
        CHECK(clGetKernelInfo(all[i], CL_KERNEL_ATTRIBUTES, 0, NULL, &attrs_size));
        cl_int e = clGetKernelInfo(all[i], CL_KERNEL_ATTRIBUTES, sizeof attrs, attrs, NULL);
        cl_int small = clGetKernelInfo(all[i], CL_KERNEL_ATTRIBUTES, 1, attrs + 200, NULL);
        printf("  %s: attributes %s [%s] (%zu bytes), into 1 byte %s\n", name, cl_err_name(e),
               attrs, attrs_size, cl_err_name(small));
        CHECK(clReleaseKernel(all[i]));
    }
    err = build(p, 1, &dev, "-DFACTOR=5", NULL, NULL);
    printf("rebuild with a kernel attached: %s\n", cl_err_name(err));
    err = build(p, 1, &dev, "-DFACTOR=5", on_built, &p);
    printf("  with a callback: %s\n", cl_err_name(err));
    int marker = 0;
    err = build(p, 1, &dev, "-DFACTOR=5", NULL, &marker);
    printf("  with user data and no callback: %s\n", cl_err_name(err));
    build_info(p, dev, "after the refused rebuilds");
    CHECK(clReleaseKernel(k));
    /* OpenCL keeps a kernel while an enqueued command needs it, and pocl lets go of the
     * command's reference on its own thread after the command completed (later still
     * under clshim, whose completion callback of the first launch runs there first): wait
     * until only this reference holds the program, at most 5 s, then rebuild. */
    for (int i = 0; i < 5000 && refcount(p) > 1; i++) usleep(1000);
    err = build(p, 1, &dev, "-DFACTOR=5", NULL, NULL);
    printf("rebuild: %s\n", cl_err_name(err));
    build_info(p, dev, "rebuilt");
    k = clCreateKernel(p, "scale", &err);
    CHECK(err);
    arg_names(k);
    printf("  scale: %d\n", run_scale(ctx, dev, k));
    /* The kernel outlives the application's last reference to its program. */
    CHECK(clReleaseProgram(p));
    CHECK(clGetKernelInfo(k, CL_KERNEL_PROGRAM, sizeof kp, &kp, NULL));
    printf("released, kernel alive: program same %d, references %u\n", kp == p, refcount(kp));
    info_text(kp, CL_PROGRAM_SOURCE, "source");
    CHECK(clRetainProgram(kp));
    printf("  retained again: references %u\n", refcount(kp));
    printf("  scale: %d\n", run_scale(ctx, dev, k));
    CHECK(clReleaseKernel(k));
    /* The program taken back from its kernel builds again from its source: with options
     * of this process alone (which no store holds a build of), then with options a
     * store may hold. */
    char own[64];
    snprintf(own, sizeof own, "-DFACTOR=4 -DPROCESS=%d", (int)getpid());
    const char *again[] = {own, "-DFACTOR=3"};
    for (int a = 0; a < 2; a++) {
        for (int i = 0; i < 5000 && refcount(kp) > 1; i++) usleep(1000);
        err = build(kp, 1, &dev, again[a], NULL, NULL);
        printf("  rebuilt (%s): %s\n", a ? again[a] : "options of this process", cl_err_name(err));
        k = clCreateKernel(kp, "scale", &err);
        CHECK(err);
        printf("  scale: %d\n", run_scale(ctx, dev, k));
        info_text(kp, CL_PROGRAM_SOURCE, "source");
        CHECK(clReleaseKernel(k));
    }
    CHECK(clReleaseProgram(kp));

    /* A program made from source as a compile's header and a link's input. */
    const char *hsrc = "#define FACTOR 4\n";
    const char *usrc = "#include \"factor.h\"\n__kernel void f(__global int *o) { o[0] = FACTOR; }\n";
    cl_program h = clCreateProgramWithSource(ctx, 1, &hsrc, NULL, &err);
    CHECK(err);
    cl_program u = clCreateProgramWithSource(ctx, 1, &usrc, NULL, &err);
    CHECK(err);
    const char *names[] = {"factor.h"};
    err = clCompileProgram(u, 1, &dev, "", 1, &h, names, NULL, NULL);
    printf("compile with a header: %s\n", cl_err_name(err));
    build_info(u, dev, "compiled");
    cl_program linked = clLinkProgram(ctx, 1, &dev, "", 1, &u, NULL, NULL, &err);
    printf("link: %s\n", cl_err_name(err));
    if (linked) {
        build_info(linked, dev, "linked");
        /* Refused while a kernel holds it, after a build whose log is empty. */
        cl_kernel f = clCreateKernel(linked, "f", &err);
        CHECK(err);
        err = build(linked, 1, &dev, "-DFACTOR=6", NULL, NULL);
        printf("  rebuilt with a kernel attached: %s\n", cl_err_name(err));
        CHECK(clReleaseKernel(f));
        CHECK(clReleaseProgram(linked));
    }
    CHECK(clReleaseProgram(u));
    CHECK(clReleaseProgram(h));

    /* A build that fails. */
    const char *bad = "__kernel void broken(__global int *o) { o[0] = undefined_name; }\n";
    cl_program b = clCreateProgramWithSource(ctx, 1, &bad, NULL, &err);
    CHECK(err);
    err = build(b, 0, NULL, "", NULL, NULL);
    printf("failing build: %s\n", cl_err_name(err));
    cl_build_status st = 99;
    CHECK(clGetProgramBuildInfo(b, dev, CL_PROGRAM_BUILD_STATUS, sizeof st, &st, NULL));
    printf("  status %d\n", (int)st);
    CHECK(clReleaseProgram(b));
    printf("build calls: %d\n", build_calls);
}

struct job {
    int index;
    cl_context ctx;
    cl_device_id dev;
    int result;
};

static void *one_thread(void *arg) {
    struct job *j = arg;
    char src[1024];
    source_of(src, sizeof src, 2);
    const char *srcs[] = {src};
    cl_int err;
    cl_program p = clCreateProgramWithSource(j->ctx, 1, srcs, NULL, &err);
    CHECK(err);
    build_or_die(p, j->dev, "-DFACTOR=3");
    cl_kernel k = clCreateKernel(p, "scale", &err);
    CHECK(err);
    j->result = run_scale(j->ctx, j->dev, k);
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseProgram(p));
    return NULL;
}

static void threads(cl_context ctx, cl_device_id dev, int n) {
    pthread_t t[64];
    struct job jobs[64];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        jobs[i] = (struct job){i, ctx, dev, 0};
        pthread_create(&t[i], NULL, one_thread, &jobs[i]);
    }
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < n; i++) printf("thread %d: %d\n", i, jobs[i].result);
}

static int built_scale(cl_context ctx, cl_device_id dev, int k_src, const char *opts) {
    char src[1024];
    source_of(src, sizeof src, k_src);
    const char *srcs[] = {src};
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
    CHECK(err);
    build_or_die(p, dev, opts);
    cl_kernel k = clCreateKernel(p, "scale", &err);
    CHECK(err);
    int r = run_scale(ctx, dev, k);
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseProgram(p));
    return r;
}

struct builder {
    cl_context ctx;
    cl_device_id dev;
    volatile int stop;
    int builds;
};

static void *keep_building(void *arg) {
    struct builder *b = arg;
    while (!b->stop) {
        built_scale(b->ctx, b->dev, 5, "-DFACTOR=8");
        b->builds++;
    }
    return NULL;
}

/* Forks while another thread builds programs (clshim's locks may be held at the instant
 * of the fork): each child uses the program it inherited as far as a driver allows after
 * fork (no kernel runs: pocl's worker threads do not survive a fork, with or without
 * clshim), retaining, querying and releasing it, and must not hang (an alarm ends it). */
static void forked(cl_context ctx, cl_device_id dev) {
    char src[1024];
    source_of(src, sizeof src, 3);
    const char *srcs[] = {src};
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
    CHECK(err);
    build_or_die(p, dev, "-DFACTOR=6");
    struct builder b = {ctx, dev, 0, 0};
    pthread_t t;
    pthread_create(&t, NULL, keep_building, &b);
    int ok = 0;
    for (int i = 0; i < 20; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            alarm(20);
            CHECK(clRetainProgram(p));
            cl_uint rc = refcount(p);
            CHECK(clReleaseProgram(p));
            size_t n = 0;
            CHECK(clGetProgramInfo(p, CL_PROGRAM_KERNEL_NAMES, 0, NULL, &n));
            _exit(rc == 2 && n > 0 ? 0 : 3);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        ok += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    b.stop = 1;
    pthread_join(t, NULL);
    printf("children that used the program after fork: %d of 20\n", ok);
    printf("parent: built meanwhile: %s\n", b.builds > 0 ? "yes" : "no");
    cl_kernel k = clCreateKernel(p, "scale", &err);
    CHECK(err);
    printf("parent: scale %d\n", run_scale(ctx, dev, k));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseProgram(p));
}

typedef cl_int (*global_pointer_fn)(cl_device_id, cl_program, const char *, size_t *,
                                    void **);

static void platforms(void) {
    /* A program-scope variable where the platform has them (Intel), a constant elsewhere
     * (pocl 3.1): one text, so that a build on pocl marks the source for both. */
    const char *src = "#ifdef __opencl_c_program_scope_global_variables\n"
                      "__global int g = 7;\n"
                      "#else\n"
                      "__constant int g = 7;\n"
                      "#endif\n"
                      "__kernel void k(__global int *o) { o[get_global_id(0)] = g + (int)get_global_id(0); }\n";
    cl_platform_id plats[8];
    cl_uint np = 0;
    CHECK(clGetPlatformIDs(8, plats, &np));
    for (cl_uint i = 0; i < np && i < 8; i++) {
        char name[256] = "";
        CHECK(clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof name, name, NULL));
        cl_device_id dev;
        CHECK(clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
        cl_context ctx = make_context(dev);
        cl_int err;
        cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
        CHECK(err);
        printf("%s:\n", name);
        build_or_die(p, dev, "-cl-std=CL3.0");
        run_int_kernel(ctx, dev, p, "k", 4, "  k");
        info_text(p, CL_PROGRAM_SOURCE, "source");
        cl_kernel k = clCreateKernel(p, "k", &err);
        CHECK(err);
        cl_program kp = NULL;
        CHECK(clGetKernelInfo(k, CL_KERNEL_PROGRAM, sizeof kp, &kp, NULL));
        printf("  kernel's program same %d\n", kp == p);
        global_pointer_fn f = (global_pointer_fn)clGetExtensionFunctionAddressForPlatform(
            plats[i], "clGetDeviceGlobalVariablePointerINTEL");
        if (f) {
            size_t size = 0;
            void *ptr = NULL;
            err = f(dev, p, "g", &size, &ptr);
            printf("  clGetDeviceGlobalVariablePointerINTEL: %s, %zu bytes, pointer %s\n",
                   cl_err_name(err), size, ptr ? "set" : "NULL");
        } else {
            printf("  no clGetDeviceGlobalVariablePointerINTEL\n");
        }
        CHECK(clReleaseKernel(k));
        CHECK(clReleaseProgram(p));
        CHECK(clReleaseContext(ctx));
    }
}

int main(int argc, char **argv) {
    const char *s = arg_value(argc, argv, "--seed");
    seed = s ? atoi(s) : 0;
    const char *t = arg_value(argc, argv, "--threads");
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    const char *mode = argc > 1 ? argv[1] : "api";
    if (strcmp(mode, "api") == 0) api(ctx, dev);
    else if (strcmp(mode, "threads") == 0) threads(ctx, dev, t ? atoi(t) : 8);
    else if (strcmp(mode, "fork") == 0) forked(ctx, dev);
    else if (strcmp(mode, "platforms") == 0) platforms();
    else {
        printf("FAILED unknown mode %s\n", mode);
        return 1;
    }
    CHECK(clReleaseContext(ctx));
    printf("ok\n");
    return 0;
}
