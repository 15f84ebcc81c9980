/* 8 threads, each building its own program (a different constant in the source) in one
 * shared context and running it; the results are printed in thread order afterwards.
 * Flags: --threads=N (default 8), --seed=N (added to every constant), --print-tids
 * (print each thread's OS thread id), --no-run. */
#define _GNU_SOURCE
#include "cltest.h"
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

struct job {
    int index;
    int seed;
    int run;
    cl_context ctx;
    cl_device_id dev;
    long tid;
    long sum;
    char line[256];
};

static void *worker(void *arg) {
    struct job *j = arg;
    j->tid = (long)syscall(SYS_gettid);
    char src[512];
    snprintf(src, sizeof src,
             "__kernel void add_const(__global int *out) {\n"
             "    int i = get_global_id(0);\n"
             "    out[i] = i + %d;\n"
             "}\n",
             1000 * (j->index + 1) + j->seed);
    const char *srcs[] = {src};
    cl_int err;
    cl_program prog = clCreateProgramWithSource(j->ctx, 1, srcs, NULL, &err);
    CHECK(err);
    build_or_die(prog, j->dev, NULL);
    if (j->run) {
        cl_kernel k = clCreateKernel(prog, "add_const", &err);
        CHECK(err);
        size_t n = 4;
        cl_mem buf = clCreateBuffer(j->ctx, CL_MEM_WRITE_ONLY, n * sizeof(cl_int), NULL, &err);
        CHECK(err);
        CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
        cl_command_queue q = clCreateCommandQueue(j->ctx, j->dev, 0, &err);
        CHECK(err);
        CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &n, NULL, 0, NULL, NULL));
        cl_int out[4];
        CHECK(clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
        snprintf(j->line, sizeof j->line, "thread %d: %d %d %d %d", j->index, out[0], out[1],
                 out[2], out[3]);
        CHECK(clReleaseCommandQueue(q));
        CHECK(clReleaseMemObject(buf));
        CHECK(clReleaseKernel(k));
    } else {
        snprintf(j->line, sizeof j->line, "thread %d: built", j->index);
    }
    CHECK(clReleaseProgram(prog));
    return NULL;
}

int main(int argc, char **argv) {
    const char *nt = arg_value(argc, argv, "--threads");
    const char *seed = arg_value(argc, argv, "--seed");
    int n = nt ? atoi(nt) : 8;
    if (n < 1 || n > 64) n = 8;
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    struct job jobs[64];
    pthread_t th[64];
    for (int i = 0; i < n; i++) {
        jobs[i] = (struct job){.index = i,
                               .seed = seed ? atoi(seed) : 0,
                               .run = !has_arg(argc, argv, "--no-run"),
                               .ctx = ctx,
                               .dev = dev};
        if (pthread_create(&th[i], NULL, worker, &jobs[i]) != 0) {
            printf("FAILED pthread_create\n");
            return 1;
        }
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < n; i++) printf("%s\n", jobs[i].line);
    if (has_arg(argc, argv, "--print-tids"))
        for (int i = 0; i < n; i++) printf("tid %d %ld\n", i, jobs[i].tid);
    CHECK(clReleaseContext(ctx));
    printf("ok\n");
    return 0;
}
