#ifndef OPENMM_GRAPH_TEST_MODEL_BUILDER_H_
#define OPENMM_GRAPH_TEST_MODEL_BUILDER_H_

/**
 * Test utility: writes random, well-formed model files (docs/model-format.md)
 * as bytes, so the C++ tests need no Python.  The Python package has its own
 * generator (openmmgraph.grades); the two are independent on purpose.
 *
 * Radial functions are f(x) = g(x) (1 - x^2)^3 with x = r / r_c and g a random
 * quadratic, so f = f' = f'' = 0 at the cut-off; the last knot is written as
 * exact zeros.  The model is generated in nm and kJ/mol and converted to the
 * requested units when written, so the same seed gives the same physical model
 * in any units.
 */

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace GraphTest {

struct ModelOptions {
    int numTypes = 2;
    int lMax = 1;
    int numChannels = 8;
    int numAxis = 4;
    bool lSum = true;
    std::vector<int> fittingWidths = {16, 16};
    std::vector<int> nodeWidths = {8, 8};
    int numInteractions = 0;
    int intervals = 60;
    double cutoff = 0.6; ///< nm
    double r0 = 0.05;    ///< nm
    double nNorm = 4;
    std::string activation = "tanh";
    bool float32 = false;
    std::string lengthUnit = "nm";
    std::string energyUnit = "kJ/mol";
    double radialScale = 0.6; ///< amplitude of the radial functions
    double lastTypeShift = 0; ///< kJ/mol added to the energy shift of the last type (e.g. beyond the CUDA platform's 1e9 limit)
    unsigned seed = 1;
};

inline double lengthScale(const std::string& unit) {
    return unit == "nm" ? 1.0 : unit == "angstrom" ? 0.1 : 0.052917721090;
}

inline double energyScale(const std::string& unit) {
    return unit == "kJ/mol" ? 1.0 : unit == "kcal/mol" ? 4.184 : unit == "eV" ? 96.48533212331 : 2625.4996394799;
}

/** A tensor to write: name, shape, values (float64; written as F32 or F64). */
struct TestTensor {
    std::vector<int64_t> shape;
    std::vector<double> values;
};

/** Serialize metadata and tensors as a safetensors file (tensors in name order, header padded to 8 bytes). */
inline std::string writeSafetensors(const std::map<std::string, std::string>& metadata, const std::map<std::string, TestTensor>& tensors,
                                    bool float32) {
    auto quote = [](const std::string& s) {
        std::string out = "\"";
        for (char c : s) {
            if (c == '"' || c == '\\')
                out += '\\';
            out += c;
        }
        return out + "\"";
    };
    std::stringstream header;
    header << "{\"__metadata__\":{";
    bool first = true;
    for (auto& entry : metadata) {
        header << (first ? "" : ",") << quote(entry.first) << ":" << quote(entry.second);
        first = false;
    }
    header << "}";
    std::string data;
    size_t itemSize = float32 ? 4 : 8;
    for (auto& entry : tensors) {
        size_t begin = data.size();
        for (double v : entry.second.values) {
            if (float32) {
                float f = (float) v;
                data.append(reinterpret_cast<const char*>(&f), 4);
            }
            else
                data.append(reinterpret_cast<const char*>(&v), 8);
        }
        header << "," << quote(entry.first) << ":{\"dtype\":\"" << (float32 ? "F32" : "F64") << "\",\"shape\":[";
        for (size_t i = 0; i < entry.second.shape.size(); i++)
            header << (i ? "," : "") << entry.second.shape[i];
        header << "],\"data_offsets\":[" << begin << "," << begin + entry.second.values.size() * itemSize << "]}";
    }
    header << "}";
    std::string headerText = header.str();
    while (headerText.size() % 8 != 0)
        headerText += ' ';
    std::string bytes(8, '\0');
    uint64_t size = headerText.size();
    for (int i = 0; i < 8; i++)
        bytes[i] = (char) ((size >> (8 * i)) & 0xFF);
    return bytes + headerText + data;
}

/** The metadata and tensors of a model file, before serialization (tests edit them to make bad files). */
struct ModelParts {
    std::map<std::string, std::string> metadata;
    std::map<std::string, TestTensor> tensors;
    bool float32 = false;
    std::string bytes() const {
        return writeSafetensors(metadata, tensors, float32);
    }
};

/** Random model parts for the given options. */
inline ModelParts makeModelParts(const ModelOptions& o) {
    std::mt19937_64 rng(o.seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    const double ls = lengthScale(o.lengthUnit), es = energyScale(o.energyUnit);
    const int T = o.numTypes, L = o.lMax, M = o.numChannels, K = o.intervals;
    std::map<std::string, std::string> meta;
    std::map<std::string, TestTensor> tensors;
    auto num = [](double x) {
        std::stringstream s;
        s.precision(17);
        s << x;
        return s.str();
    };
    const char* names[] = {"H", "C", "N", "O", "S", "P", "F", "Cl"};
    const int numbers[] = {1, 6, 7, 8, 16, 15, 9, 17};
    std::string typeNames = "[", typeNumbers = "[";
    for (int t = 0; t < T; t++) {
        typeNames += std::string(t ? "," : "") + "\"" + (t < 8 ? names[t] : "X" + std::to_string(t)) + "\"";
        typeNumbers += std::string(t ? "," : "") + std::to_string(t < 8 ? numbers[t] : 0);
    }
    meta["format"] = "openmm-graph";
    meta["format_version"] = "1";
    meta["length_unit"] = o.lengthUnit;
    meta["energy_unit"] = o.energyUnit;
    meta["type_names"] = typeNames + "]";
    meta["type_atomic_numbers"] = typeNumbers + "]";
    const double dr = (o.cutoff - o.r0) / K;
    meta["cutoff"] = num(o.cutoff / ls);
    meta["n_channels"] = std::to_string(M);
    meta["n_axis"] = std::to_string(o.numAxis);
    meta["l_max"] = std::to_string(L);
    meta["descriptor_l_sum"] = o.lSum ? "true" : "false";
    meta["n_norm"] = num(o.nNorm);
    meta["radial_r0"] = num(o.r0 / ls);
    meta["radial_dr"] = num(dr / ls);
    meta["radial_intervals"] = std::to_string(K);
    meta["activation"] = o.activation;
    meta["n_interactions"] = std::to_string(o.numInteractions);

    auto table = [&]() {
        TestTensor t;
        t.shape = {T, T, L + 1, K + 1, 3, M};
        t.values.assign((size_t) T * T * (L + 1) * (K + 1) * 3 * M, 0.0);
        for (int a = 0; a < T; a++)
            for (int b = 0; b < T; b++)
                for (int l = 0; l <= L; l++)
                    for (int k = 0; k < M; k++) {
                        // F(x) = (c0 + c1 x + c2 x^2) (1 - x^2)^3 as polynomial coefficients.
                        double g[3] = {o.radialScale * normal(rng), o.radialScale * normal(rng), o.radialScale * normal(rng)};
                        const double s[7] = {1, 0, -3, 0, 3, 0, -1};
                        double F[9] = {0};
                        for (int p = 0; p < 3; p++)
                            for (int q = 0; q < 7; q++)
                                F[p + q] += g[p] * s[q];
                        for (int q = 0; q <= K; q++) {
                            double r = o.r0 + q * dr, x = r / o.cutoff;
                            double f = 0, f1 = 0, f2 = 0;
                            for (int p = 8; p >= 0; p--)
                                f = f * x + F[p];
                            for (int p = 8; p >= 1; p--)
                                f1 = f1 * x + p * F[p];
                            for (int p = 8; p >= 2; p--)
                                f2 = f2 * x + p * (p - 1) * F[p];
                            f1 /= o.cutoff;
                            f2 /= o.cutoff * o.cutoff;
                            if (q == K)
                                f = f1 = f2 = 0.0;
                            size_t base = ((((size_t) a * T + b) * (L + 1) + l) * (K + 1) + q) * 3 * M;
                            // Stored in the file's length unit: f' per unit, f'' per unit^2.
                            t.values[base + k] = f;
                            t.values[base + M + k] = f1 * ls;
                            t.values[base + 2 * M + k] = f2 * ls * ls;
                        }
                    }
        return t;
    };
    auto network = [&](const std::string& prefix, int inputs, const std::vector<int>& widths, int outputs, bool energy,
                       std::vector<bool>& residual) {
        int width = inputs;
        residual.clear();
        for (size_t n = 0; n < widths.size(); n++) {
            bool isResidual = widths[n] == width;
            residual.push_back(isResidual);
            TestTensor w, b;
            w.shape = {widths[n], width};
            b.shape = {widths[n]};
            for (int x = 0; x < widths[n] * width; x++)
                w.values.push_back(normal(rng) / std::sqrt((double) width));
            for (int x = 0; x < widths[n]; x++)
                b.values.push_back(0.1 * normal(rng));
            tensors[prefix + "." + std::to_string(n) + ".weight"] = w;
            tensors[prefix + "." + std::to_string(n) + ".bias"] = b;
            if (isResidual) {
                TestTensor ts;
                ts.shape = {widths[n]};
                for (int x = 0; x < widths[n]; x++)
                    ts.values.push_back(0.1 + 0.4 * uniform(rng));
                tensors[prefix + "." + std::to_string(n) + ".timestep"] = ts;
            }
            width = widths[n];
        }
        TestTensor w, b;
        w.shape = {outputs, width};
        b.shape = {outputs};
        double scale = energy ? 1.0 / es : 1.0;
        for (int x = 0; x < outputs * width; x++)
            w.values.push_back(scale * normal(rng) / std::sqrt((double) width));
        for (int x = 0; x < outputs; x++)
            b.values.push_back(scale * 0.1 * normal(rng));
        tensors[prefix + ".out.weight"] = w;
        tensors[prefix + ".out.bias"] = b;
    };
    auto residualList = [](const std::vector<bool>& residual) {
        std::string s = "[";
        for (size_t i = 0; i < residual.size(); i++)
            s += std::string(i ? "," : "") + (residual[i] ? "true" : "false");
        return s + "]";
    };

    tensors["radial.table"] = table();
    const int descriptorSize = (o.lSum ? 1 : L + 1) * M * o.numAxis;
    std::vector<bool> residual;
    for (int a = 0; a < T; a++)
        network("fitting." + std::to_string(a), descriptorSize * (1 + o.numInteractions), o.fittingWidths, 1, true, residual);
    meta["fitting_residual"] = residualList(residual);
    TestTensor shift;
    shift.shape = {T};
    for (int a = 0; a < T; a++)
        shift.values.push_back((-1.0 - a + (a == T - 1 ? o.lastTypeShift : 0.0)) / es);
    tensors["energy_shift"] = shift;
    if (o.numInteractions == 1) {
        tensors["interaction.radial.table"] = table();
        for (int a = 0; a < T; a++)
            network("node." + std::to_string(a), descriptorSize, o.nodeWidths, M, false, residual);
        meta["node_residual"] = residualList(residual);
    }
    return ModelParts{meta, tensors, o.float32};
}

/** Random model file bytes for the given options. */
inline std::string makeModelBytes(const ModelOptions& options) {
    return makeModelParts(options).bytes();
}

} // namespace GraphTest

#endif
