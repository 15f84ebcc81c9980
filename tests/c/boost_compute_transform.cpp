/* A minimal client of Boost.Compute (Debian's libboost-dev, header-only) with its offline
 * cache on: y = 3x + 1 over 1024 integers on the first device, printed with its sum.
 * Boost.Compute is the OpenCL client here: each algorithm generates its kernel source and
 * builds it from source; with BOOST_COMPUTE_USE_OFFLINE_CACHE it writes the program's
 * binary to $HOME/.boost_compute and loads it (clCreateProgramWithBinary, then
 * clBuildProgram) on later runs. */
#define BOOST_COMPUTE_USE_OFFLINE_CACHE
#include <boost/compute/algorithm/copy.hpp>
#include <boost/compute/algorithm/transform.hpp>
#include <boost/compute/container/vector.hpp>
#include <boost/compute/lambda.hpp>
#include <boost/compute/system.hpp>

#include <cstdio>
#include <vector>

namespace compute = boost::compute;

int main() {
    compute::device dev = compute::system::default_device();
    compute::context ctx(dev);
    compute::command_queue q(ctx, dev);
    const int n = 1024;
    std::vector<int> host(n);
    for (int i = 0; i < n; i++) host[i] = i % 97;
    compute::vector<int> x(host.begin(), host.end(), q);
    compute::vector<int> y(n, ctx);
    using compute::lambda::_1;
    compute::transform(x.begin(), x.end(), y.begin(), _1 * 3 + 1, q);
    std::vector<int> out(n);
    compute::copy(y.begin(), y.end(), out.begin(), q);
    long sum = 0;
    for (int v : out) sum += v;
    std::printf("transform n=%d y[0]=%d y[96]=%d y[1023]=%d sum=%ld\n", n, out[0], out[96],
                out[n - 1], sum);
    return 0;
}
