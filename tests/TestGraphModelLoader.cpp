// The model loader: every rule of docs/model-format.md, error messages that
// name the key, and a fuzz of mutated files (no crash, only OpenMMException).
#include "GraphForce.h"
#include "TestModelBuilder.h"
#include "internal/GraphModel.h"
#include "internal/GraphModelLoader.h"
#include "openmm/OpenMMException.h"
#include <cmath>
#include <cstdio>
#include <fstream>
#include <gtest/gtest.h>
#include <random>

using namespace GraphPlugin;
using OpenMM::OpenMMException;

namespace {

GraphTest::ModelOptions smallOptions() {
    GraphTest::ModelOptions options;
    options.intervals = 8;
    options.numChannels = 4;
    options.numAxis = 2;
    options.fittingWidths = {6, 6};
    options.nodeWidths = {4, 4};
    options.numInteractions = 1;
    return options;
}

/** Expect the bytes to be rejected with a message containing every one of `words`. */
void expectRejected(const std::string& bytes, const std::vector<std::string>& words) {
    try {
        GraphModelLoader::fromBytes(bytes);
        ADD_FAILURE() << "a malformed model was accepted (expected a message with '" << words[0] << "')";
    }
    catch (const OpenMMException& e) {
        std::string message = e.what();
        EXPECT_EQ(message.find("GraphForce: model file"), 0u) << message;
        for (const std::string& word : words)
            EXPECT_NE(message.find(word), std::string::npos) << "'" << word << "' missing from: " << message;
    }
}

void expectMetadataRejected(const std::string& key, const std::string& value, const std::vector<std::string>& words) {
    GraphTest::ModelParts parts = GraphTest::makeModelParts(smallOptions());
    parts.metadata[key] = value;
    expectRejected(parts.bytes(), words);
}

} // namespace

TEST(GraphModelLoader, ReadsAWellFormedModelAndConvertsUnits) {
    GraphTest::ModelOptions options = smallOptions();
    options.lengthUnit = "angstrom";
    options.energyUnit = "kcal/mol";
    auto model = GraphModelLoader::fromBytes(GraphTest::makeModelBytes(options));
    EXPECT_EQ(model->numTypes, 2);
    EXPECT_EQ(model->typeNames[1], "C");
    EXPECT_EQ(model->typeAtomicNumbers[1], 6);
    EXPECT_NEAR(model->cutoff, 0.6, 1e-14); // 6 angstrom in nm
    EXPECT_NEAR(model->radialR0, 0.05, 1e-14);
    EXPECT_NEAR(model->radialDr, 0.55 / 8, 1e-14);
    EXPECT_EQ(model->lengthScale, 0.1);
    EXPECT_EQ(model->energyScale, 4.184);
    EXPECT_EQ(model->numChannels, 4);
    EXPECT_EQ(model->numAxis, 2);
    EXPECT_EQ(model->descriptorSize(), 8);
    EXPECT_EQ(model->fittingInputSize(), 16);
    ASSERT_EQ(model->fitting.size(), 2u);
    EXPECT_EQ(model->fitting[0].hidden[0].numInputs, 16);
    EXPECT_FALSE(model->fitting[0].hidden[0].residual);
    EXPECT_TRUE(model->fitting[0].hidden[1].residual);
    EXPECT_EQ(model->node.size(), 2u);
    EXPECT_EQ(model->node[0].output.numOutputs, 4);
    EXPECT_FALSE(model->fileIsFloat32);
    // Energies in kJ/mol: the builder wrote -1 kJ/mol as -1/4.184 kcal/mol.
    EXPECT_NEAR(model->energyShift[0], -1.0, 1e-12);
    EXPECT_GT(model->countParameters(), 0);
}

TEST(GraphModelLoader, ReadsFilesFromDisk) {
    std::string path = testing::TempDir() + "graph_model_loader_test.safetensors";
    std::string bytes = GraphTest::makeModelBytes(smallOptions());
    std::ofstream(path, std::ios::binary) << bytes;
    GraphForce force(path);
    EXPECT_EQ(force.getModelBytes(), bytes);
    EXPECT_NEAR(force.getCutoff(), 0.6, 1e-15);
    EXPECT_EQ(force.getTypeIndex("C"), 1);
    EXPECT_THROW(force.getTypeIndex("Xe"), OpenMMException);
    std::remove(path.c_str());
    try {
        GraphForce missing(path);
        FAIL() << "a missing file was accepted";
    }
    catch (const OpenMMException& e) {
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
    }
}

TEST(GraphModelLoader, RejectsBrokenContainers) {
    std::string good = GraphTest::makeModelBytes(smallOptions());
    expectRejected(good.substr(0, 5), {"8-byte header length"});
    expectRejected(good.substr(0, good.size() - 8), {"data"});
    expectRejected(good.substr(0, 200), {"header length"});
    std::string longHeader = good;
    longHeader[6] = 1; // header length ~ 2^48
    expectRejected(longHeader, {"header length"});
    std::string badJson = good;
    badJson[8] = '[';
    expectRejected(badJson, {"JSON"});
    std::string notObject = good;
    notObject.replace(8, 1, "7");
    expectRejected(notObject, {"JSON"});
    std::string extraData = good + "12345678";
    expectRejected(extraData, {"data size"});
}

TEST(GraphModelLoader, RejectsBadMetadata) {
    expectMetadataRejected("format", "graph", {"'format'", "openmm-graph", "graph"});
    expectMetadataRejected("format_version", "2", {"'format_version'", "\"2\""});
    expectMetadataRejected("length_unit", "meter", {"'length_unit'", "meter"});
    expectMetadataRejected("energy_unit", "J", {"'energy_unit'", "\"J\""});
    expectMetadataRejected("type_names", "[\"H\",\"H\"]", {"'type_names'", "unique"});
    expectMetadataRejected("type_names", "H,C", {"'type_names'"});
    expectMetadataRejected("type_atomic_numbers", "[1]", {"'type_atomic_numbers'", "expected 2"});
    expectMetadataRejected("cutoff", "nan", {"'cutoff'", "nan"});
    expectMetadataRejected("cutoff", "-0.6", {"'cutoff'"});
    expectMetadataRejected("cutoff", "0x1.3p-1", {"'cutoff'", "0x1.3p-1"});
    expectMetadataRejected("cutoff", " 0.6", {"'cutoff'"});
    expectMetadataRejected("n_channels", "4.5", {"'n_channels'", "4.5"});
    expectMetadataRejected("n_axis", "5", {"'n_axis'", "[1, 4]", "5"});
    expectMetadataRejected("l_max", "3", {"'l_max'", "3"});
    expectMetadataRejected("descriptor_l_sum", "yes", {"'descriptor_l_sum'", "yes"});
    expectMetadataRejected("n_norm", "0", {"'n_norm'"});
    expectMetadataRejected("radial_dr", "0.1", {"'radial_dr'", "cutoff"});
    expectMetadataRejected("radial_intervals", "9", {"'radial_intervals'"});
    expectMetadataRejected("activation", "relu", {"'activation'", "relu"});
    expectMetadataRejected("fitting_residual", "[false]", {"fitting.0.1.", "not a tensor of this model"});
    expectMetadataRejected("fitting_residual", "[false, true, true]", {"fitting.0.2.weight", "missing"});
    expectMetadataRejected("fitting_residual", "[true, true]", {"fitting.0.0.weight", "residual"});
    expectMetadataRejected("n_interactions", "2", {"'n_interactions'", "2"});
    expectMetadataRejected("unexpected", "1", {"'unexpected'", "unexpected key"});
    GraphTest::ModelParts parts = GraphTest::makeModelParts(smallOptions());
    parts.metadata.erase("n_norm");
    expectRejected(parts.bytes(), {"'n_norm'", "missing"});
    parts = GraphTest::makeModelParts(smallOptions());
    parts.metadata.erase("node_residual");
    expectRejected(parts.bytes(), {"'node_residual'", "missing"});
}

TEST(GraphModelLoader, RejectsBadTensors) {
    GraphTest::ModelParts parts = GraphTest::makeModelParts(smallOptions());
    parts.tensors.erase("energy_shift");
    expectRejected(parts.bytes(), {"'energy_shift'", "missing", "[2]"});

    parts = GraphTest::makeModelParts(smallOptions());
    parts.tensors["extra.tensor"] = GraphTest::TestTensor{{1}, {0.0}};
    expectRejected(parts.bytes(), {"'extra.tensor'", "unexpected"});

    parts = GraphTest::makeModelParts(smallOptions());
    parts.tensors["energy_shift"] = GraphTest::TestTensor{{3}, {0.0, 0.0, 0.0}};
    expectRejected(parts.bytes(), {"'energy_shift'", "expected shape [2]", "found [3]"});

    parts = GraphTest::makeModelParts(smallOptions());
    parts.tensors["fitting.1.0.bias"].values[2] = std::nan("");
    expectRejected(parts.bytes(), {"'fitting.1.0.bias'", "finite", "index 2"});

    parts = GraphTest::makeModelParts(smallOptions());
    parts.tensors["fitting.0.1.weight"].values[0] = INFINITY;
    expectRejected(parts.bytes(), {"'fitting.0.1.weight'", "finite"});

    parts = GraphTest::makeModelParts(smallOptions());
    {
        // f' of table (1, 0, l=1, knot K, channel 3) not zero at the cut-off.
        GraphTest::TestTensor& table = parts.tensors["radial.table"];
        const int T = 2, L = 1, K = 8, M = 4;
        table.values[((((size_t) 1 * T + 0) * (L + 1) + 1) * (K + 1) + K) * 3 * M + M + 3] = 1e-9;
        expectRejected(parts.bytes(), {"'radial.table'", "cut-off", "f'", "[1, 0, 1, 8, 1, 3]"});
    }

    parts = GraphTest::makeModelParts(smallOptions());
    parts.tensors["fitting.0.0.timestep"] = GraphTest::TestTensor{{6}, {1, 1, 1, 1, 1, 1}};
    expectRejected(parts.bytes(), {"'fitting.0.0.timestep'", "residual"});

    parts = GraphTest::makeModelParts(smallOptions());
    parts.tensors["node.0.out.weight"].shape = {3, 4};
    parts.tensors["node.0.out.weight"].values.resize(12);
    expectRejected(parts.bytes(), {"'node.0.out.weight'", "[4, 4]", "[3, 4]"});
}

TEST(GraphModelLoader, RejectsBadTensorEntries) {
    std::string good = GraphTest::makeModelBytes(smallOptions());
    auto replaceFirst = [&](const std::string& from, const std::string& to) {
        std::string bytes = good;
        size_t at = bytes.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        bytes.replace(at, from.size(), to);
        // Keep the header length right: pad or trim trailing spaces of the header.
        return bytes;
    };
    // Same-length edits keep the container valid, so the tensor rule itself is what fails.
    expectRejected(replaceFirst("\"F64\"", "\"I64\""), {"dtype", "I64"});
    expectRejected(replaceFirst("\"F64\"", "\"F16\""), {"dtype", "F16"});
    std::string offsets = good;
    size_t at = offsets.find("\"data_offsets\":[0,");
    ASSERT_NE(at, std::string::npos);
    offsets[at + 16] = '8'; // begin 8 instead of 0: span no longer matches the shape
    expectRejected(offsets, {"data_offsets"});
    std::string shape = replaceFirst("\"shape\":[2]", "\"shape\":[9]");
    expectRejected(shape, {"data_offsets", "shape [9]"});
}

TEST(GraphModelLoader, FuzzedFilesNeverCrash) {
    // 10,000 mutations of a small valid model: byte flips (mostly in the
    // header, where the parser works), truncations, insertions, deletions and
    // header-length edits.  Every outcome must be a model or an OpenMMException.
    GraphTest::ModelOptions options = smallOptions();
    options.intervals = 3;
    options.numChannels = 2;
    options.numAxis = 1;
    options.fittingWidths = {2};
    options.nodeWidths = {2};
    const std::string good = GraphTest::makeModelBytes(options);
    uint64_t headerSize = 0;
    for (int i = 7; i >= 0; i--)
        headerSize = (headerSize << 8) | (unsigned char) good[i];
    std::mt19937_64 rng(2024);
    const char interesting[] = "{}[]\",:0123456789.eE-+ntfalsr\\u \x00\xff";
    int accepted = 0, rejected = 0;
    const int numCases = 10000;
    for (int c = 0; c < numCases; c++) {
        std::string bytes = good;
        int numMutations = 1 + (int) (rng() % 4);
        for (int k = 0; k < numMutations && !bytes.empty(); k++) {
            size_t limit = (rng() % 4 != 0) ? std::min<size_t>(bytes.size(), 8 + headerSize) : bytes.size();
            size_t pos = rng() % limit;
            switch (rng() % 6) {
            case 0:
                bytes[pos] = (char) (rng() & 0xFF);
                break;
            case 1:
                bytes[pos] = interesting[rng() % (sizeof(interesting) - 1)];
                break;
            case 2:
                bytes.erase(pos, 1 + rng() % 16);
                break;
            case 3:
                bytes.insert(pos, 1, interesting[rng() % (sizeof(interesting) - 1)]);
                break;
            case 4:
                bytes.resize(rng() % (bytes.size() + 1));
                break;
            case 5:
                bytes[rng() % 8] = (char) (rng() & 0xFF);
                break;
            }
        }
        try {
            auto model = GraphModelLoader::fromBytes(bytes);
            ASSERT_TRUE(model != nullptr);
            ASSERT_GT(model->numTypes, 0);
            accepted++;
        }
        catch (const OpenMMException&) {
            rejected++;
        }
    }
    EXPECT_EQ(accepted + rejected, numCases);
    EXPECT_GT(rejected, numCases / 2);
    std::printf("fuzz: %d mutated files, %d accepted (harmless edits such as a changed weight), %d rejected\n", numCases, accepted,
                rejected);
}
