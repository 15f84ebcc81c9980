/* A client with its own binary cache, for the native-store tests: `--save=FILE` builds
 * the program from source (or, with --compile-link, compiles then links it), runs its
 * kernel, reads its binary back and writes it to FILE; `--load=FILE` makes the program
 * from FILE's binary and prints what an application sees: the create status and
 * binary_status, CL_PROGRAM_BINARY_TYPE and the build status before the build, the
 * build's result, the binary type, build status and log after it, and the kernel's
 * output, and after the build its build options and its kernel's first argument name
 * (as the driver answers them: pocl gives argument names only to a program built with
 * -cl-kernel-arg-info). --seed=N changes the source; the build options are "-DSCALE=3",
 * --load-options=OPTS gives the load's build other ones, --name-length=N pads the
 * kernel's name ("cube") with underscores to N characters, --no-run saves without
 * running the kernel (pocl cannot launch kernels with very long names), and --linger=S
 * stays S seconds before its exit (a job that computes on after its builds), or
 * --linger-while=PATTERN while a file matches the glob PATTERN (60 s at most);
 * --reap-children then forks a child that ends, and waits for children until none is left
 * (`while (wait(NULL) > 0)`), printing how many it reaped; --tmpdir-at-exit=DIR sets
 * TMPDIR to DIR before it returns; --term-self ends with a SIGTERM it sends itself, whose
 * handler calls exit() (a scheduler's SIGTERM, handled as many jobs do). */
#include "cltest.h"
#include <glob.h>
#include <unistd.h>
#include <signal.h>
#include <sys/wait.h>

static void print_type(cl_program p, cl_device_id d, const char *when) {
    cl_program_binary_type t = 99;
    cl_int e = clGetProgramBuildInfo(p, d, CL_PROGRAM_BINARY_TYPE, sizeof t, &t, NULL);
    cl_build_status st = 99;
    cl_int e2 = clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_STATUS, sizeof st, &st, NULL);
    printf("%s: binary type %s %u, build status %s %d\n", when, cl_err_name(e), (unsigned)t,
           cl_err_name(e2), (int)st);
}

/* A job's own SIGTERM handler: it ends the process with exit(), as many do to flush. */
static void exit_on_term(int sig) {
    (void)sig;
    exit(0);
}

int main(int argc, char **argv) {
    const char *seed = arg_value(argc, argv, "--seed");
    const char *save = arg_value(argc, argv, "--save");
    const char *load = arg_value(argc, argv, "--load");
    int compile_link = has_arg(argc, argv, "--compile-link");
    const char *length = arg_value(argc, argv, "--name-length");
    char name[1024] = "cube";
    size_t want = length ? (size_t)atoi(length) : 0;
    for (size_t i = strlen(name); i < want && i + 1 < sizeof name; i++) name[i] = '_';
    char src[2048];
    snprintf(src, sizeof src,
             "__kernel void %s(__global int *out) {\n"
             "    int i = get_global_id(0);\n"
             "    out[i] = SCALE * i * i * i + %s;\n"
             "}\n",
             name, seed ? seed : "5");
    const char *options = "-DSCALE=3";
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    cl_int err;
    if (save) {
        const char *srcs[] = {src};
        cl_program prog = clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
        CHECK(err);
        if (compile_link) {
            CHECK(clCompileProgram(prog, 1, &dev, options, 0, NULL, NULL, NULL, NULL));
            cl_program linked = clLinkProgram(ctx, 1, &dev, "", 1, &prog, NULL, NULL, &err);
            CHECK(err);
            CHECK(clReleaseProgram(prog));
            prog = linked;
        } else {
            build_or_die(prog, dev, options);
        }
        if (!has_arg(argc, argv, "--no-run")) run_int_kernel(ctx, dev, prog, name, 6, "source");
        if (write_binary(prog, save) != 0) return 1;
        printf("saved\n");
        CHECK(clReleaseProgram(prog));
    }
    if (load) {
        size_t size = 0;
        unsigned char *bin = read_file(load, &size);
        if (!bin) {
            printf("FAILED cannot read %s\n", load);
            return 1;
        }
        cl_int status = 12345;
        const unsigned char *cbins[] = {bin};
        cl_program p = clCreateProgramWithBinary(ctx, 1, &dev, &size, cbins, &status, &err);
        printf("create: %s, binary_status %s\n", cl_err_name(err),
               status == 12345 ? "unset" : cl_err_name(status));
        if (err != CL_SUCCESS) return 1;
        print_type(p, dev, "before build");
        const char *load_options = arg_value(argc, argv, "--load-options");
        cl_int b = clBuildProgram(p, 1, &dev, load_options ? load_options : options, NULL, NULL);
        printf("build: %s\n", cl_err_name(b));
        print_type(p, dev, "after build");
        char opts[512] = "";
        cl_int eo = clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_OPTIONS, sizeof opts - 1, opts,
                                          NULL);
        printf("options: %s [%s]\n", cl_err_name(eo), opts);
        if (b == CL_SUCCESS) {
            cl_kernel k = clCreateKernel(p, name, &err);
            CHECK(err);
            char arg[64] = "";
            cl_int ea = clGetKernelArgInfo(k, 0, CL_KERNEL_ARG_NAME, sizeof arg - 1, arg, NULL);
            printf("argument name: %s [%s]\n", cl_err_name(ea), ea == CL_SUCCESS ? arg : "");
            CHECK(clReleaseKernel(k));
        }
        char log[4096] = "";
        size_t log_len = 0;
        cl_int e = clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log,
                                         &log_len);
        printf("log: %s [%s]\n", cl_err_name(e), log);
        if (b == CL_SUCCESS) run_int_kernel(ctx, dev, p, name, 6, "binary");
        CHECK(clReleaseProgram(p));
        free(bin);
    }
    CHECK(clReleaseContext(ctx));
    printf("ok\n");
    fflush(stdout);
    const char *linger = arg_value(argc, argv, "--linger");
    if (linger) sleep((unsigned)atoi(linger));
    const char *pattern = arg_value(argc, argv, "--linger-while");
    for (int i = 0; pattern && i < 600; i++) {
        glob_t g;
        int found = glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc > 0;
        globfree(&g);
        if (!found) break;
        usleep(100000);
    }
    const char *tmpdir = arg_value(argc, argv, "--tmpdir-at-exit");
    if (tmpdir) setenv("TMPDIR", tmpdir, 1);
    if (has_arg(argc, argv, "--reap-children")) {
        /* A process that waits for every child it has until there is none (a launcher's,
         * a shell's loop): its own child only. */
        pid_t c = fork();
        if (c == 0) _exit(0);
        int n = 0;
        while (wait(NULL) > 0) n++;
        printf("reaped %d\n", n);
    }
    if (has_arg(argc, argv, "--term-self")) {
        signal(SIGTERM, exit_on_term);
        raise(SIGTERM);
    }
    return 0;
}
