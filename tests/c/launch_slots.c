/* Prints the dispatch-table slot of every entry point clshim forwards through, as the
 * system's OpenCL ICD header lays the table out (tests/launches.rs compares them with
 * src/dispatch.rs). */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl_icd.h>
#include <stddef.h>
#include <stdio.h>

#define SLOT(name, f) printf("%s %zu\n", name, offsetof(cl_icd_dispatch, f) / sizeof(void *))

int main(void) {
    SLOT("GET_PLATFORM_INFO", clGetPlatformInfo);
    SLOT("GET_DEVICE_INFO", clGetDeviceInfo);
    SLOT("GET_CONTEXT_INFO", clGetContextInfo);
    SLOT("RELEASE_COMMAND_QUEUE", clReleaseCommandQueue);
    SLOT("GET_COMMAND_QUEUE_INFO", clGetCommandQueueInfo);
    SLOT("CREATE_PROGRAM_WITH_SOURCE", clCreateProgramWithSource);
    SLOT("CREATE_PROGRAM_WITH_BINARY", clCreateProgramWithBinary);
    SLOT("RELEASE_PROGRAM", clReleaseProgram);
    SLOT("BUILD_PROGRAM", clBuildProgram);
    SLOT("GET_PROGRAM_INFO", clGetProgramInfo);
    SLOT("GET_PROGRAM_BUILD_INFO", clGetProgramBuildInfo);
    SLOT("CREATE_KERNEL", clCreateKernel);
    SLOT("CREATE_KERNELS_IN_PROGRAM", clCreateKernelsInProgram);
    SLOT("GET_KERNEL_INFO", clGetKernelInfo);
    SLOT("RELEASE_EVENT", clReleaseEvent);
    SLOT("ENQUEUE_ND_RANGE_KERNEL", clEnqueueNDRangeKernel);
    SLOT("ENQUEUE_TASK", clEnqueueTask);
    SLOT("SET_EVENT_CALLBACK", clSetEventCallback);
    SLOT("COMPILE_PROGRAM", clCompileProgram);
    SLOT("LINK_PROGRAM", clLinkProgram);
    SLOT("CLONE_KERNEL", clCloneKernel);
    SLOT("CREATE_PROGRAM_WITH_IL", clCreateProgramWithIL);
    return 0;
}
