/* A minimal client of clFFT (Debian's libclfft-dev): one forward complex FFT of 16 points
 * on the first device, printing the spectrum and a checksum. clFFT is the OpenCL client
 * here: it generates its kernel source for the plan, builds it, and, when the environment
 * names a directory in CLFFT_CACHE_PATH, writes the program's binary there and loads it
 * (clCreateProgramWithBinary) on later runs instead of building from source. */
#include "cltest.h" /* first: it asks for the OpenCL 1.2 API that clFFT.h's headers hide */

#include <clFFT.h>

#define FFT_CHECK(call)                                                          \
    do {                                                                         \
        clfftStatus st_ = (call);                                                \
        if (st_ != CLFFT_SUCCESS) {                                              \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, st_); \
            printf("FAILED %s -> %d\n", #call, st_);                             \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

int main(void) {
    enum { N = 16 };
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    cl_int err;
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    CHECK(err);

    clfftSetupData setup;
    FFT_CHECK(clfftInitSetupData(&setup));
    FFT_CHECK(clfftSetup(&setup));

    float data[2 * N];
    for (int i = 0; i < N; i++) {
        data[2 * i] = (float)(i % 5);     /* real part */
        data[2 * i + 1] = (float)(i % 3); /* imaginary part */
    }
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof data, data,
                                &err);
    CHECK(err);

    clfftPlanHandle plan;
    size_t lengths[1] = {N};
    FFT_CHECK(clfftCreateDefaultPlan(&plan, ctx, CLFFT_1D, lengths));
    FFT_CHECK(clfftSetPlanPrecision(plan, CLFFT_SINGLE));
    FFT_CHECK(clfftSetLayout(plan, CLFFT_COMPLEX_INTERLEAVED, CLFFT_COMPLEX_INTERLEAVED));
    FFT_CHECK(clfftSetResultLocation(plan, CLFFT_INPLACE));
    FFT_CHECK(clfftBakePlan(plan, 1, &q, NULL, NULL));
    FFT_CHECK(clfftEnqueueTransform(plan, CLFFT_FORWARD, 1, &q, 0, NULL, NULL, &buf, NULL, NULL));
    CHECK(clFinish(q));
    CHECK(clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof data, data, 0, NULL, NULL));

    printf("fft n=%d:", N);
    for (int i = 0; i < N; i++) printf(" (%.4f,%.4f)", data[2 * i], data[2 * i + 1]);
    printf(" fnv=%016llx\n", (unsigned long long)fnv1a64(data, sizeof data));

    FFT_CHECK(clfftDestroyPlan(&plan));
    FFT_CHECK(clfftTeardown());
    clReleaseMemObject(buf);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
