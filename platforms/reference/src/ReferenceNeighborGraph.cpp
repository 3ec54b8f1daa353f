#include "ReferenceNeighborGraph.h"
#include "internal/GraphSamePosition.h"
#include "openmm/OpenMMException.h"
#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

/** Cell offsets to visit along one axis of `numCells` cells (no cell twice when the axis wraps). */
std::vector<int> axisOffsets(int numCells, bool periodic) {
    if (!periodic || numCells >= 3)
        return {-1, 0, 1};
    if (numCells == 2)
        return {0, 1};
    return {0};
}

} // namespace

void ReferenceNeighborGraph::build(const std::vector<Vec3>& positions, const Vec3* box, double cutoff,
                                   const std::vector<int>& particleNames) {
    const int n = (int) positions.size();
    const double cutoff2 = cutoff * cutoff;
    const bool periodic = box != nullptr;

    // Cell coordinates: fractional coordinates in a periodic box (cells at
    // least one cut-off thick perpendicular to each face), Cartesian otherwise.
    int numCells[3] = {1, 1, 1};
    std::vector<Vec3> cellCoord(n);
    if (periodic) {
        const Vec3 &a = box[0], &b = box[1], &c = box[2];
        double volume = a[0] * b[1] * c[2];
        Vec3 crossBC = b.cross(c), crossCA = c.cross(a);
        double height[3] = {volume / std::sqrt(crossBC.dot(crossBC)), volume / std::sqrt(crossCA.dot(crossCA)), c[2]};
        for (int d = 0; d < 3; d++)
            numCells[d] = std::max(1, (int) std::floor(height[d] / cutoff));
        for (int i = 0; i < n; i++) {
            const Vec3& x = positions[i];
            double sc = x[2] / c[2];
            double sb = (x[1] - sc * c[1]) / b[1];
            double sa = (x[0] - sb * b[0] - sc * c[0]) / a[0];
            Vec3 s(sa - std::floor(sa), sb - std::floor(sb), sc - std::floor(sc));
            cellCoord[i] = s;
        }
    }
    else if (n > 0) {
        Vec3 low = positions[0], high = positions[0];
        for (const Vec3& x : positions)
            for (int d = 0; d < 3; d++) {
                low[d] = std::min(low[d], x[d]);
                high[d] = std::max(high[d], x[d]);
            }
        for (int d = 0; d < 3; d++)
            numCells[d] = std::max(1, (int) std::floor((high[d] - low[d]) / cutoff));
        for (int i = 0; i < n; i++)
            for (int d = 0; d < 3; d++)
                cellCoord[i][d] = high[d] > low[d] ? (positions[i][d] - low[d]) / (high[d] - low[d]) : 0.0;
    }
    // Sparse systems: fewer, larger cells (still at least one cut-off thick).
    double maxCells = 8.0 * n + 27;
    while ((double) numCells[0] * numCells[1] * numCells[2] > maxCells) {
        int largest = std::max_element(numCells, numCells + 3) - numCells;
        numCells[largest] = std::max(1, numCells[largest] / 2);
    }

    // Bin the particles (counting sort by cell).
    const int totalCells = numCells[0] * numCells[1] * numCells[2];
    std::vector<int> cellOf(n), cellStart(totalCells + 1, 0), cellParticles(n);
    auto cellIndex = [&](int ca, int cb, int cc) { return (cc * numCells[1] + cb) * numCells[0] + ca; };
    std::vector<int> cellA(n), cellB(n), cellC(n);
    for (int i = 0; i < n; i++) {
        int idx[3];
        for (int d = 0; d < 3; d++)
            idx[d] = std::min(numCells[d] - 1, std::max(0, (int) (cellCoord[i][d] * numCells[d])));
        cellA[i] = idx[0];
        cellB[i] = idx[1];
        cellC[i] = idx[2];
        cellOf[i] = cellIndex(idx[0], idx[1], idx[2]);
        cellStart[cellOf[i] + 1]++;
    }
    std::partial_sum(cellStart.begin(), cellStart.end(), cellStart.begin());
    {
        std::vector<int> fill(cellStart.begin(), cellStart.end() - 1);
        for (int i = 0; i < n; i++)
            cellParticles[fill[cellOf[i]]++] = i;
    }
    std::vector<int> offsets[3];
    for (int d = 0; d < 3; d++)
        offsets[d] = axisOffsets(numCells[d], periodic);

    // Rows, each sorted canonically.
    rowOffsets.assign(n + 1, 0);
    neighbors.clear();
    edgeVectors.clear();
    struct Candidate {
        double r2;
        int j;
        Vec3 d;
    };
    std::vector<Candidate> row;
    for (int i = 0; i < n; i++) {
        row.clear();
        for (int oc : offsets[2])
            for (int ob : offsets[1])
                for (int oa : offsets[0]) {
                    int ca = cellA[i] + oa, cb = cellB[i] + ob, cc = cellC[i] + oc;
                    if (periodic) {
                        ca = (ca + numCells[0]) % numCells[0];
                        cb = (cb + numCells[1]) % numCells[1];
                        cc = (cc + numCells[2]) % numCells[2];
                    }
                    else if (ca < 0 || cb < 0 || cc < 0 || ca >= numCells[0] || cb >= numCells[1] || cc >= numCells[2])
                        continue;
                    int cell = cellIndex(ca, cb, cc);
                    for (int k = cellStart[cell]; k < cellStart[cell + 1]; k++) {
                        int j = cellParticles[k];
                        if (j == i)
                            continue;
                        Vec3 d = positions[j] - positions[i];
                        if (periodic) {
                            d -= box[2] * std::floor(d[2] / box[2][2] + 0.5);
                            d -= box[1] * std::floor(d[1] / box[1][1] + 0.5);
                            d -= box[0] * std::floor(d[0] / box[0][0] + 0.5);
                        }
                        double r2 = d.dot(d);
                        if (!(r2 < cutoff2))
                            continue;
                        const double xi[3] = {positions[i][0], positions[i][1], positions[i][2]};
                        const double xj[3] = {positions[j][0], positions[j][1], positions[j][2]};
                        if (isSamePosition(r2, xi, xj, cutoff2)) {
                            std::stringstream s;
                            s << "GraphForce: System particles " << particleNames[std::min(i, j)] << " and "
                              << particleNames[std::max(i, j)] << " are at the same position" << (periodic ? " (minimum image)" : "")
                              << "; the model is undefined at zero distance";
                            throw OpenMMException(s.str());
                        }
                        row.push_back(Candidate{r2, j, d});
                    }
                }
        std::sort(row.begin(), row.end(), [](const Candidate& x, const Candidate& y) { return x.r2 != y.r2 ? x.r2 < y.r2 : x.j < y.j; });
        for (const Candidate& candidate : row) {
            neighbors.push_back(candidate.j);
            edgeVectors.push_back(candidate.d);
        }
        rowOffsets[i + 1] = (int64_t) neighbors.size();
    }
}
