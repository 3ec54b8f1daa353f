#include "ReferenceMpiDomains.h"
#include "internal/GraphModelLoader.h"
#include "openmm/OpenMMException.h"
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <dlfcn.h>
#include <numeric>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

const double FixedPointScale = 4294967296.0; // 2^32 per kJ/mol/nm, OpenMM's force scale
const char* LibraryName = "libOpenMMGraphMPI.so";

/**
 * dlopen libOpenMMGraphMPI: $OPENMMGRAPH_MPI_LIBRARY when set (a backend built
 * against another MPI, as openmmgraph.mpi also honours), else from the folder
 * of libOpenMMGraph (where the package installs it), else by name.
 */
void* openLibrary(std::string& errors) {
    if (const char* override = std::getenv("OPENMMGRAPH_MPI_LIBRARY")) {
        if (void* handle = dlopen(override, RTLD_NOW | RTLD_GLOBAL))
            return handle;
        errors += std::string("OPENMMGRAPH_MPI_LIBRARY=") + override + ": " + dlerror();
        return nullptr;
    }
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
    communicatorCreate = symbol<int (*)(int64_t, int64_t, const int32_t*, const int64_t*, int64_t*, char*, size_t)>(
        library, "ommgraph_mpi_communicator_create");
    communicatorDestroy = symbol<int (*)(int64_t, char*, size_t)>(library, "ommgraph_mpi_communicator_destroy");
    // The communicate interface itself (libOpenMMGraphCommunicate, a dependency of libOpenMMGraphMPI).
    communicateForward = symbol<int (*)(int64_t, const OMMGraphCommBuffer*)>(library, "ommgraph_communicate_forward");
    communicateReverse = symbol<int (*)(int64_t, const OMMGraphCommBuffer*)>(library, "ommgraph_communicate_reverse");
    communicateLastError = symbol<const char* (*) ()>(library, "ommgraph_communicator_last_error");
    char message[1024] = "";
    check(initialize(message, sizeof(message)), message);
    check(world(&rank, &size, message, sizeof(message)), message);
}

void ReferenceMpiDomains::check(int status, const char* what) const {
    if (status != 0)
        throw OpenMMException(std::string("GraphForce: Domains = \"mpi\": ") + what);
}

std::vector<int> ReferenceMpiDomains::ownerRanks(const std::vector<Vec3>& positions, const Vec3* box) const {
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
    std::vector<int> owner(n);
    for (int p = 0; p < n; p++)
        owner[order[p]] = (int) ((int64_t) p * size / std::max(1, n));
    return owner;
}

std::vector<char> ReferenceMpiDomains::ownedParticles(const std::vector<int>& owner) const {
    std::vector<char> owned(owner.size());
    for (size_t i = 0; i < owner.size(); i++)
        owned[i] = owner[i] == rank ? 1 : 0;
    return owned;
}

ReferenceMpiDomains::Exchange::Exchange(const ReferenceMpiDomains& domains, const std::vector<int>& owner, const ReferenceNeighborGraph& graph)
    : domains(domains) {
    // Every rank's owned rows are its particles in ascending index; a ghost's owner row is its place among them.
    const int n = (int) owner.size();
    std::vector<int64_t> rowOnOwner(n);
    std::vector<int64_t> count(domains.size, 0);
    for (int i = 0; i < n; i++)
        rowOnOwner[i] = count[owner[i]]++;
    std::vector<char> ghost(n, 0);
    for (int i = 0; i < n; i++)
        if (owner[i] == domains.rank) {
            ownedNodes.push_back(i);
            for (int64_t e = graph.rowOffsets[i]; e < graph.rowOffsets[i + 1]; e++)
                if (owner[graph.neighbors[e]] != domains.rank)
                    ghost[graph.neighbors[e]] = 1;
        }
    std::vector<int32_t> ghostRank;
    std::vector<int64_t> ghostRow;
    for (int i = 0; i < n; i++)
        if (ghost[i]) {
            ghostNodes.push_back(i);
            ghostRank.push_back(owner[i]);
            ghostRow.push_back(rowOnOwner[i]);
        }
    char message[1024] = "";
    domains.check(domains.communicatorCreate((int64_t) ownedNodes.size(), (int64_t) ghostNodes.size(), ghostRank.data(), ghostRow.data(), &handle,
                                             message, sizeof(message)),
                  message);
}

ReferenceMpiDomains::Exchange::~Exchange() {
    char message[1024] = "";
    domains.communicatorDestroy(handle, message, sizeof(message));
}

void ReferenceMpiDomains::Exchange::run(std::vector<double>& values, int M, bool isForward) {
    const size_t owned = ownedNodes.size(), ghosts = ghostNodes.size();
    table.assign((owned + ghosts) * M, 0.0);
    for (size_t r = 0; r < owned; r++)
        std::copy(&values[(size_t) ownedNodes[r] * M], &values[(size_t) ownedNodes[r] * M] + M, &table[r * M]);
    for (size_t g = 0; g < ghosts; g++)
        std::copy(&values[(size_t) ghostNodes[g] * M], &values[(size_t) ghostNodes[g] * M] + M, &table[(owned + g) * M]);
    OMMGraphCommBuffer buffer{};
    buffer.data = table.data();
    buffer.dtype = OMMGRAPH_COMM_FLOAT64;
    buffer.deviceType = OMMGRAPH_COMM_DEVICE_CPU;
    buffer.numOwned = (int64_t) owned;
    buffer.numGhost = (int64_t) ghosts;
    buffer.numFeatures = M;
    buffer.rowStride = M;
    const int status = isForward ? domains.communicateForward(handle, &buffer) : domains.communicateReverse(handle, &buffer);
    domains.check(status, status == 0 ? "" : domains.communicateLastError());
    for (size_t r = 0; r < owned; r++)
        std::copy(&table[r * M], &table[(r + 1) * M], &values[(size_t) ownedNodes[r] * M]);
    for (size_t g = 0; g < ghosts; g++)
        std::copy(&table[(owned + g) * M], &table[(owned + g + 1) * M], &values[(size_t) ghostNodes[g] * M]);
}

void ReferenceMpiDomains::Exchange::forward(std::vector<double>& values, int M) {
    run(values, M, true);
}

void ReferenceMpiDomains::Exchange::reverse(std::vector<double>& gradients, int M) {
    run(gradients, M, false);
}

void ReferenceMpiDomains::sumForces(std::vector<Vec3>& forces, const std::string& failure) const {
    std::vector<int64_t> fixed;
    fixed.reserve(3 * forces.size() + 1); // and sumAgreed's word
    std::string problem = failure;
    for (size_t i = 0; i < forces.size() && problem.empty(); i++)
        for (int c = 0; c < 3; c++) {
            const double value = forces[i][c] * FixedPointScale;
            if (!(std::fabs(value) < 9.0e18)) {
                problem = "GraphForce: Domains = \"mpi\": a force (" + std::to_string(forces[i][c]) +
                          " kJ/mol/nm) is not finite or beyond the fixed-point range";
                break;
            }
            fixed.push_back((int64_t) std::llround(value));
        }
    fixed.resize(3 * forces.size(), 0);
    sumAgreed(fixed, problem);
    for (size_t i = 0; i < forces.size(); i++)
        for (int c = 0; c < 3; c++)
            forces[i][c] = (double) fixed[3 * i + c] / FixedPointScale;
}

void ReferenceMpiDomains::sumInt64(std::vector<int64_t>& values) const {
    char message[1024] = "";
    check(allreduceInt64(values.data(), values.size(), message, sizeof(message)), message);
}

void ReferenceMpiDomains::sumAgreed(std::vector<int64_t>& values, const std::string& failure) const {
    if (!failure.empty())
        std::fill(values.begin(), values.end(), 0);
    values.push_back(failure.empty() ? 0 : 1);
    sumInt64(values);
    const int64_t failedRanks = values.back();
    values.pop_back();
    if (failedRanks == 0)
        return;
    if (!failure.empty())
        throw OpenMMException(failure);
    throw OpenMMException("GraphForce: Domains = \"mpi\": the evaluation failed on " + std::to_string(failedRanks) +
                          (failedRanks == 1 ? " other rank" : " other ranks") + " (see its error there)");
}

void ReferenceMpiDomains::agree(const std::string& failure) const {
    std::vector<int64_t> none;
    sumAgreed(none, failure);
}

double ReferenceMpiDomains::sumEnergy(double energy) const {
    double total = 0;
    char message[1024] = "";
    check(sumDoubleOrdered(&energy, &total, message, sizeof(message)), message);
    return total;
}
