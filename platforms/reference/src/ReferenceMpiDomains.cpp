#include "ReferenceMpiDomains.h"
#include "internal/GraphModelLoader.h"
#include "openmm/OpenMMException.h"
#include <algorithm>
#include <cmath>
#include <dlfcn.h>
#include <numeric>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

const double FixedPointScale = 4294967296.0; // 2^32 per kJ/mol/nm, OpenMM's force scale
const char* LibraryName = "libOpenMMGraphMPI.so";

/** dlopen libOpenMMGraphMPI: from the folder of libOpenMMGraph (where the package installs it), else by name. */
void* openLibrary(std::string& errors) {
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&GraphModelLoader::readFile), &info) != 0 && info.dli_fname != nullptr) {
        std::string path(info.dli_fname);
        const size_t slash = path.rfind('/');
        path = (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/" + LibraryName;
        if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL))
            return handle;
        errors += dlerror();
        errors += "; ";
    }
    if (void* handle = dlopen(LibraryName, RTLD_NOW | RTLD_GLOBAL))
        return handle;
    errors += dlerror();
    return nullptr;
}

template <typename Function>
Function symbol(void* library, const char* name) {
    Function function = reinterpret_cast<Function>(dlsym(library, name));
    if (function == nullptr)
        throw OpenMMException(std::string("GraphForce: Domains = \"mpi\": ") + LibraryName + " has no function " + name);
    return function;
}

} // namespace

ReferenceMpiDomains::ReferenceMpiDomains() {
    std::string errors;
    void* library = openLibrary(errors);
    if (library == nullptr)
        throw OpenMMException(std::string("GraphForce: Domains = \"mpi\" needs ") + LibraryName +
                              " (built with the package when MPI is found, e.g. pip install mpich; docs/mpi.md): " + errors);
    auto initialize = symbol<int (*)(char*, size_t)>(library, "ommgraph_mpi_initialize");
    auto world = symbol<int (*)(int*, int*, char*, size_t)>(library, "ommgraph_mpi_world");
    allreduceInt64 = symbol<int (*)(int64_t*, size_t, char*, size_t)>(library, "ommgraph_mpi_allreduce_sum_int64");
    sumDoubleOrdered = symbol<int (*)(const double*, double*, char*, size_t)>(library, "ommgraph_mpi_allreduce_sum_double_ordered");
    char message[1024] = "";
    check(initialize(message, sizeof(message)), message);
    check(world(&rank, &size, message, sizeof(message)), message);
}

void ReferenceMpiDomains::check(int status, const char* what) const {
    if (status != 0)
        throw OpenMMException(std::string("GraphForce: Domains = \"mpi\": ") + what);
}

std::vector<char> ReferenceMpiDomains::ownedParticles(const std::vector<Vec3>& positions, const Vec3* box) const {
    const int n = (int) positions.size();
    std::vector<double> coordinate(n);
    for (int i = 0; i < n; i++) {
        if (box == nullptr)
            coordinate[i] = positions[i][0];
        else {
            // Fractional coordinate along a in OpenMM's reduced triclinic form, wrapped into [0, 1).
            const double s2 = positions[i][2] / box[2][2];
            const double s1 = (positions[i][1] - s2 * box[2][1]) / box[1][1];
            const double s0 = (positions[i][0] - s2 * box[2][0] - s1 * box[1][0]) / box[0][0];
            coordinate[i] = s0 - std::floor(s0);
        }
    }
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return coordinate[a] < coordinate[b] || (coordinate[a] == coordinate[b] && a < b); });
    std::vector<char> owned(n, 0);
    for (int p = 0; p < n; p++)
        if ((int) ((int64_t) p * size / std::max(1, n)) == rank)
            owned[order[p]] = 1;
    return owned;
}

void ReferenceMpiDomains::sumForces(std::vector<Vec3>& forces) const {
    std::vector<int64_t> fixed(3 * forces.size());
    for (size_t i = 0; i < forces.size(); i++)
        for (int c = 0; c < 3; c++) {
            const double value = forces[i][c] * FixedPointScale;
            if (!(std::fabs(value) < 9.0e18))
                throw OpenMMException("GraphForce: Domains = \"mpi\": a force (" + std::to_string(forces[i][c]) +
                                      " kJ/mol/nm) is not finite or beyond the fixed-point range");
            fixed[3 * i + c] = (int64_t) std::llround(value);
        }
    char message[1024] = "";
    check(allreduceInt64(fixed.data(), fixed.size(), message, sizeof(message)), message);
    for (size_t i = 0; i < forces.size(); i++)
        for (int c = 0; c < 3; c++)
            forces[i][c] = (double) fixed[3 * i + c] / FixedPointScale;
}

double ReferenceMpiDomains::sumEnergy(double energy) const {
    double total = 0;
    char message[1024] = "";
    check(sumDoubleOrdered(&energy, &total, message, sizeof(message)), message);
    return total;
}
