// The model loader: every rule of docs/model-format.md, error messages that
// name the key, and a fuzz of mutated files (no crash, only OpenMMException).
#include "GraphForce.h"
#include "TestModelBuilder.h"
#include "internal/GraphModel.h"
#include "internal/GraphModelLoader.h"
#include "internal/QuotedText.h"
#include "openmm/OpenMMException.h"
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <memory>
#include <random>
#include <sys/stat.h>
#include <thread>

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

/** Expect the bytes to be rejected with a message that starts with `prefix` and contains every one of `words`. */
void expectRejectedWith(const std::string& bytes, const std::string& prefix, const std::vector<std::string>& words) {
    try {
        GraphModelLoader::fromBytes(bytes);
        ADD_FAILURE() << "a malformed model was accepted (expected a message with '" << words[0] << "')";
    }
    catch (const OpenMMException& e) {
        std::string message = e.what();
        EXPECT_EQ(message.find(prefix), 0u) << message;
        for (const std::string& word : words)
            EXPECT_NE(message.find(word), std::string::npos) << "'" << word << "' missing from: " << message;
    }
}

/** A model whose type names are `first` and `second` (raw bytes in the header). */
std::string modelWithTypeNames(const std::string& first, const std::string& second) {
    GraphTest::ModelParts parts = GraphTest::makeModelParts(smallOptions());
    parts.metadata["type_names"] = "[\"" + first + "\",\"" + second + "\"]";
    return parts.bytes();
}

// ------------------------------------------------------------------ zip archives (TorchScript models) built by hand

uint32_t referenceCrc32(const std::string& data) {
    uint32_t crc = 0xFFFFFFFFu;
    for (unsigned char byte : data) {
        crc ^= byte;
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
    }
    return ~crc;
}

struct ZipEntry {
    std::string name, content;
    int method = 0;            ///< 0 stored, 8 deflated
    std::string deflated;      ///< the raw deflate stream of `content` when method is 8
    int64_t recordedSize = -1; ///< the uncompressed size the archive records (-1: the real one)
    int aliasOf = -1;          ///< >= 0: no data of its own; its directory record points at that earlier entry's
};

void putLittleEndian(std::string& out, uint64_t value, int bytes) {
    for (int i = 0; i < bytes; i++)
        out += (char) ((value >> (8 * i)) & 0xFF);
}

/** A zip archive as torch.jit.save writes one: local headers and data, the central directory, the end record. */
std::string makeZip(const std::vector<ZipEntry>& entries) {
    std::string out, directory;
    std::vector<uint64_t> offsets;
    for (const ZipEntry& named : entries) {
        const ZipEntry& entry = named.aliasOf >= 0 ? entries[named.aliasOf] : named;
        const std::string& data = entry.method == 0 ? entry.content : entry.deflated;
        const uint32_t crc = referenceCrc32(entry.content);
        const uint64_t size = entry.recordedSize >= 0 ? (uint64_t) entry.recordedSize : entry.content.size();
        const uint64_t offset = named.aliasOf >= 0 ? offsets[named.aliasOf] : out.size();
        offsets.push_back(offset);
        for (std::string* record : {&out, &directory}) {
            const bool central = record == &directory;
            if (!central && named.aliasOf >= 0)
                continue;
            putLittleEndian(*record, central ? 0x02014b50 : 0x04034b50, 4);
            if (central)
                putLittleEndian(*record, 20, 2); // made by
            putLittleEndian(*record, 20, 2);     // needed
            putLittleEndian(*record, 0, 2);      // flags
            putLittleEndian(*record, entry.method, 2);
            putLittleEndian(*record, 0, 4); // time, date
            putLittleEndian(*record, crc, 4);
            putLittleEndian(*record, data.size(), 4);
            putLittleEndian(*record, size, 4);
            putLittleEndian(*record, named.name.size(), 2);
            putLittleEndian(*record, 0, 2); // extra
            if (central) {
                record->append(2 + 2 + 2 + 4, '\0'); // comment, disk, attributes
                putLittleEndian(*record, offset, 4);
            }
            *record += named.name;
        }
        if (named.aliasOf < 0)
            out += data;
    }
    const uint64_t directoryOffset = out.size();
    out += directory;
    putLittleEndian(out, 0x06054b50, 4);
    putLittleEndian(out, 0, 4);
    putLittleEndian(out, entries.size(), 2);
    putLittleEndian(out, entries.size(), 2);
    putLittleEndian(out, directory.size(), 4);
    putLittleEndian(out, directoryOffset, 4);
    putLittleEndian(out, 0, 2);
    return out;
}

/** 600 bytes of a skewed alphabet (an LCG), whose deflate stream (zlib level 9) is one dynamic-Huffman block. */
std::string dynamicText() {
    std::string text;
    uint64_t x = 1;
    for (int i = 0; i < 600; i++) {
        x = (x * 1103515245 + 12345) % (1ULL << 31);
        text += "aaaaaaaabbbbccd\n"[(x >> 16) % 16];
    }
    return text;
}

const std::string DynamicDeflated(
    "\x45\x51\xc1\x01\xc4\x30\x08\xfa\xbb\xa5\xe0\xfe\x33\x1c\xa0\xe9\xe5\xd1\x1a\x05\x94\xd8\xd3\x00\x1a\xdd\x2c\xb2\xbb\xab"
    "\xc7\x1f\x1d\xe5\xa9\x92\x6b\x0d\x6e\xc5\x50\xc5\xe8\x29\xa0\x2a\x29\x12\x63\xd0\x10\x9c\x65\xd6\x23\x49\xc0\x12\xcd\x2e"
    "\xac\xa6\x71\xaa\xba\x55\xfa\x58\x0d\x8b\xf5\x67\x42\x95\x00\x4d\x92\x74\x73\xa6\xa2\xbf\x02\xab\xd1\xa7\xf7\x0e\x6a\x46"
    "\x79\xd1\x30\x57\xb7\x82\x1d\x34\x3e\x66\x0e\x5f\xe8\x20\x60\x61\xc4\x66\xb4\xdd\x89\x38\xb8\x2d\x2e\x30\xf7\x29\xae\xa7"
    "\x5e\xc8\x99\x58\x5b\xe5\x6b\x7e\xee\x5a\x27\xf0\x47\x99\x7a\xad\xf5\x74\x1d\xbb\x78\xca\xd8\xe2\x64\x70\x1e\x91\x73\xea"
    "\xc2\x6b\x4e\x59\xcc\x4e\xb4\x28\x47\x9e\xa4\x18\x13\xfb\x14\x7a\xd6\x49\xfb\x9d\x2f\x8b\xc2\xc5\x3a\xa1\xac\x66\x7a\xa7"
    "\x73\xf6\xeb\x34\xef\x95\x90\x35\x7b\x7f\xb2\xb0\x0f\x39\x19\xaf\xa2\x18\x2f\x4c\x72\x67\xbf\xa1\xb7\xb1\xd7\x87\xcd\xe0"
    "\x07",
    211);
const std::string FixedText = "class M(Module): pass\n";
const std::string FixedDeflated("\x4b\xce\x49\x2c\x2e\x56\xf0\xd5\xf0\xcd\x4f\x29\xcd\x49\xd5\xb4\x52\x28\x00\xf2\xb9\x00", 22);

/** A deflate stream of one stored block. */
std::string storedBlock(const std::string& content) {
    std::string out(1, '\x01');
    putLittleEndian(out, content.size(), 2);
    putLittleEndian(out, ~content.size() & 0xFFFF, 2);
    return out + content;
}

std::string torchMetadata(const std::string& types = "[{\"name\": \"H\", \"atomic_number\": 1}, {\"name\": \"O\", \"atomic_number\": 8}]",
                          const std::string& extra = "") {
    return "{\"format\": \"openmm-graph-torch\", \"version\": 1, \"interface\": \"particle_energies\", \"length_unit\": \"angstrom\", "
           "\"energy_unit\": \"eV\", \"length_scale_nm\": 0.1, \"cutoff\": 5.0, \"types\": " +
           types + ", \"dtype\": \"float64\"" + extra + "}";
}

const std::string TorchData = std::string("\x80\x02}q\x00(X\x06\x00\x00\x00weightsq\x01", 20) + std::string(300, '\x3f');

/** The entries of a small TorchScript-like archive: stored data, deflated code (dynamic, fixed and stored blocks), metadata. */
std::vector<ZipEntry> torchEntries(const std::string& metadata = torchMetadata()) {
    std::vector<ZipEntry> entries(5);
    entries[0].name = "m/data.pkl";
    entries[0].content = TorchData;
    entries[1].name = "m/code/__torch__/m.py";
    entries[1].content = dynamicText();
    entries[1].method = 8;
    entries[1].deflated = DynamicDeflated;
    entries[2].name = "m/code/__torch__/fixed.py";
    entries[2].content = FixedText;
    entries[2].method = 8;
    entries[2].deflated = FixedDeflated;
    entries[3].name = "m/code/__torch__/stored.py";
    entries[3].content = "def stored(): return 1\n";
    entries[3].method = 8;
    entries[3].deflated = storedBlock(entries[3].content);
    entries[4].name = "m/extra/openmmgraph.json";
    entries[4].content = metadata;
    return entries;
}

void expectTorchRejected(const std::string& bytes, const std::vector<std::string>& words) {
    expectRejectedWith(bytes, "GraphForce: ", words);
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
    // Only the length: said so, not "expected 1 to 0 bytes".
    expectRejected(good.substr(0, 8), {"header length", "ends after these 8 bytes"});
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
    // A name short: both keys are named, since either may be the wrong one.
    expectMetadataRejected("type_names", "[\"H\"]", {"'type_atomic_numbers'", "'type_names', which lists 1 names", "found 2"});
    expectMetadataRejected("cutoff", "nan", {"'cutoff'", "nan"});
    expectMetadataRejected("cutoff", "-0.6", {"'cutoff'"});
    expectMetadataRejected("cutoff", "0x1.3p-1", {"'cutoff'", "0x1.3p-1"});
    expectMetadataRejected("cutoff", " 0.6", {"'cutoff'"});
    expectMetadataRejected("n_channels", "4.5", {"'n_channels'", "4.5"});
    expectMetadataRejected("n_axis", "5", {"'n_axis'", "[1, 4]", "5"});
    expectMetadataRejected("l_max", "3", {"'l_max'", "3"});
    expectMetadataRejected("descriptor_l_sum", "yes", {"'descriptor_l_sum'", "yes"});
    expectMetadataRejected("n_norm", "0", {"'n_norm'"});
    // Numbers in messages are the shortest text that reads back as the same double (0.6, not 0.59999999999999998).
    expectMetadataRejected("radial_dr", "0.1", {"'radial_dr'", "cutoff = 0.6,", "found 0.8500000000000001"});
    expectMetadataRejected("radial_r0", "0.6", {"'radial_r0'", "< cutoff (0.6)", "found 0.6"});
    expectMetadataRejected("n_norm", "-0.3", {"'n_norm'", "> 0,"});
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

    // A missing output layer's weight: its shape is known ([1, width] for the energy, [M, width] for the node features).
    parts = GraphTest::makeModelParts(smallOptions());
    parts.tensors.erase("fitting.1.out.weight");
    expectRejected(parts.bytes(), {"'fitting.1.out.weight'", "missing", "expected shape [1, 6]"});
    parts = GraphTest::makeModelParts(smallOptions());
    parts.tensors.erase("node.0.out.weight");
    expectRejected(parts.bytes(), {"'node.0.out.weight'", "missing", "expected shape [4, 4]"});
    parts = GraphTest::makeModelParts(smallOptions());
    parts.tensors.erase("fitting.0.1.weight");
    expectRejected(parts.bytes(), {"'fitting.0.1.weight'", "missing", "expected shape [width, 6]"});

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
    // Overlapping tensors: both are named, with their spans; a gap is measured.  The last tensor in the data (the tensors
    // are written in name order: energy_shift first, radial.table last) is moved onto the first, or 8 bytes on.
    {
        auto moveTable = [&](bool overlap) {
            uint64_t headerSize = 0;
            for (int i = 7; i >= 0; i--)
                headerSize = headerSize << 8 | (unsigned char) good[i];
            std::string header = good.substr(8, headerSize), data = good.substr(8 + headerSize);
            size_t at = header.find("\"radial.table\":{");
            at = header.find("\"data_offsets\":[", at) + 16;
            const size_t comma = header.find(',', at), close = header.find(']', at);
            const uint64_t begin = std::stoull(header.substr(at, comma - at)),
                           end = std::stoull(header.substr(comma + 1, close - comma - 1));
            const uint64_t newBegin = overlap ? 0 : begin + 8;
            header.replace(at, close - at, std::to_string(newBegin) + "," + std::to_string(newBegin + end - begin));
            if (!overlap)
                data += std::string(8, '\0');
            std::string bytes(8, '\0');
            for (int i = 0; i < 8; i++)
                bytes[i] = (char) ((header.size() >> (8 * i)) & 0xFF);
            return bytes + header + data;
        };
        expectRejected(moveTable(true), {"tensors 'energy_shift' [0, 16] and 'radial.table' [0, ", "overlap"});
        expectRejected(moveTable(false), {"tensor 'radial.table' [", "a gap of 8 bytes before it"});
    }
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

TEST(GraphModelLoader, HeaderStringsMustBeUtf8) {
    // Well-formed UTF-8 of every length, at the edges of the ranges, is accepted.
    for (auto names : std::vector<std::pair<std::string, std::string>>{{"\xC3\x96", "\xE6\xB0\xB4"},             // Ö, 水
                                                                       {"\xF0\x9D\x90\x80", "\xF4\x8F\xBF\xBF"}, // U+1D400, U+10FFFF
                                                                       {"\xED\x9F\xBF", "\xEE\x80\x80"},         // U+D7FF, U+E000
                                                                       {"\xC2\x80", "\xEF\xBF\xBF"}}) {          // U+0080, U+FFFF
        auto model = GraphModelLoader::fromBytes(modelWithTypeNames(names.first, names.second));
        EXPECT_EQ(model->typeNames[0], names.first);
        EXPECT_EQ(model->typeNames[1], names.second);
    }
    // Each ill-formed sequence is rejected, with the problem and the byte (of the header) where the sequence starts.
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"\xE7", "byte 2 is not a continuation byte"}, // the review's case: a lone lead byte
        {"\x80", "continuation byte without a lead byte"},
        {"\xBF"
         "a",
         "continuation byte without a lead byte"},
        {"\xC0\x80", "overlong"},
        {"\xC1\xBF", "overlong"},
        {"\xE0\x80\xAF", "overlong"},
        {"\xE0\x9F\xBF", "overlong"},
        {"\xF0\x8F\xBF\xBF", "overlong"},
        {"\xED\xA0\x80", "surrogate"},
        {"\xED\xBF\xBF", "surrogate"},
        {"\xF4\x90\x80\x80", "beyond U+10FFFF"},
        {"\xF5\x80\x80\x80", "never occurs in UTF-8"},
        {"\xF8\x88\x80\x80\x80", "never occurs in UTF-8"},
        {"\xFE", "never occurs in UTF-8"},
        {"\xFF", "never occurs in UTF-8"},
        {"\xE6\xB0", "byte 3 is not a continuation byte"},
        {"\xF0\x9D\x90", "byte 4 is not a continuation byte"},
        {"\xC3"
         "A",
         "byte 2 is not a continuation byte"},
    };
    for (const auto& entry : bad) {
        const std::string bytes = modelWithTypeNames("H", "C" + entry.first);
        uint64_t headerSize = 0;
        for (int i = 7; i >= 0; i--)
            headerSize = (headerSize << 8) | (unsigned char) bytes[i];
        const size_t offset = std::string(bytes, 8, headerSize).find("C" + entry.first) + 1;
        expectRejected(bytes, {"the safetensors header is not valid JSON", "not valid UTF-8", entry.second});
        try {
            GraphModelLoader::fromBytes(bytes);
        }
        catch (const OpenMMException& e) {
            const std::string message = e.what(), end = " at byte " + std::to_string(offset);
            EXPECT_TRUE(message.size() > end.size() && message.compare(message.size() - end.size(), end.size(), end) == 0)
                << "expected the message to end with '" << end << "': " << message;
        }
    }
    // A sequence cut off by the end of the text (here the metadata JSON of a TorchScript archive).
    std::vector<ZipEntry> entries = torchEntries();
    entries[4].content = "{\"format\": \"\xE6\xB0";
    expectTorchRejected(makeZip(entries),
                        {"openmmgraph.json is not valid JSON", "not valid UTF-8", "the text ends inside it", "at byte 12"});
    // A message never carries the raw byte (it must stay valid UTF-8): a stray byte outside a string is shown in hex.
    GraphTest::ModelParts parts = GraphTest::makeModelParts(smallOptions());
    std::string stray = parts.bytes();
    stray[8] = '\xE7';
    try {
        GraphModelLoader::fromBytes(stray);
        ADD_FAILURE() << "a header starting with byte 0xE7 was accepted";
    }
    catch (const OpenMMException& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("unexpected character byte 0xE7 at byte 0"), std::string::npos) << message;
        EXPECT_EQ(message.find('\xE7'), std::string::npos) << message;
    }
}

TEST(GraphModelLoader, ReadsTorchScriptMetadata) {
    auto model = GraphModelLoader::fromBytes(makeZip(torchEntries(torchMetadata(
        "[{\"name\": \"H\", \"atomic_number\": 1}, {\"name\": \"\xE6\xB0\xB4\", \"atomic_number\": 8.0}]", ", \"n_interactions\": 1"))));
    EXPECT_EQ(model->kind, ModelKind::TorchScript);
    ASSERT_EQ(model->numTypes, 2);
    EXPECT_EQ(model->typeNames[1], "\xE6\xB0\xB4");
    EXPECT_EQ(model->typeAtomicNumbers[1], 8);
    EXPECT_EQ(model->numInteractions, 1);
    EXPECT_NEAR(model->cutoff, 0.5, 1e-15);
}

/** An AOTInductor package's entries as torch._inductor writes them (under `prefix`), with `skip` left out. */
std::vector<ZipEntry> packageEntries(const std::string& prefix, const std::string& skip = "") {
    const std::string metadata = torchMetadata().replace(torchMetadata().find("\"particle_energies\""), 19,
                                                         "\"particle_energies_and_gradients\", \"program\": \"aotinductor\"");
    const std::string model = prefix + "data/aotinductor/model/";
    std::vector<ZipEntry> entries;
    for (const auto& [name, content] :
         std::vector<std::pair<std::string, std::string>>{{model + "w.wrapper.cpp", "// wrapper"},
                                                          {model + "k.kernel.cpp", "// kernels"},
                                                          {model + "w.wrapper_metadata.json", "{\"AOTI_DEVICE_KEY\": \"cpu\"}"},
                                                          {model + "k.kernel_metadata.json", "{\"AOTI_DEVICE_KEY\": \"cpu\"}"},
                                                          {model + "w.wrapper.so", std::string("\x7f"
                                                                                               "ELF",
                                                                                               4)},
                                                          {prefix + "archive_format", "pt2"},
                                                          {prefix + "extra/openmmgraph.json", metadata}}) {
        if (name == skip)
            continue;
        ZipEntry entry;
        entry.name = name;
        entry.content = content;
        entries.push_back(entry);
    }
    return entries;
}

TEST(GraphModelLoader, AotInductorPackagesMustHoldWhatLibTorchReads) {
    // LibTorch's package loader reads the first two entries' names unchecked, compiles a package without a .so with
    // commands from the package, and reads the metadata beside the last .cpp: the loader refuses what would do that.
    // (openmmgraph.json is found under a top folder, so a package always has one: "pkg/"; two top folders below)
    for (const std::string prefix : {"pkg/", "p.pt2.0a1b/"}) {
        SCOPED_TRACE("prefix '" + prefix + "'");
        auto model = GraphModelLoader::fromBytes(makeZip(packageEntries(prefix)));
        EXPECT_EQ(model->kind, ModelKind::AOTInductor);
        const std::string directory = prefix + "data/aotinductor/model/";
        expectTorchRejected(makeZip(packageEntries(prefix, directory + "w.wrapper.so")),
                            {"AOTInductor package", "no compiled program (no " + directory + "*.so)", "export_aoti"});
        // the last .cpp (the kernels') names the metadata LibTorch reads
        expectTorchRejected(makeZip(packageEntries(prefix, directory + "k.kernel_metadata.json")),
                            {"AOTInductor package", "no '" + directory + "k.kernel_metadata.json'"});
        std::vector<ZipEntry> noSource;
        for (const ZipEntry& entry : packageEntries(prefix))
            if (entry.name.find(".cpp") == std::string::npos)
                noSource.push_back(entry);
        expectTorchRejected(makeZip(noSource), {"AOTInductor package", "no " + directory + "*.cpp with its _metadata.json"});
    }
    std::vector<ZipEntry> alone;
    for (const ZipEntry& entry : packageEntries("pkg/"))
        if (entry.name == "pkg/extra/openmmgraph.json")
            alone.push_back(entry);
    expectTorchRejected(makeZip(alone), {"AOTInductor package: it has one entry", "export_aoti"});
    // entries of two top folders: no prefix, so the program is looked for at data/aotinductor/model/
    std::vector<ZipEntry> split = packageEntries("pkg/");
    split[0].name = "other/" + split[0].name.substr(4); // its first entry elsewhere: no common prefix
    expectTorchRejected(makeZip(split), {"no compiled program (no data/aotinductor/model/*.so)"});
}

TEST(GraphModelLoader, TorchScriptArchiveEntriesMustNotOverlap) {
    // A directory that points many entries at one deflated stream made the check inflate it once an entry: a 2 MB
    // archive of 20,000 such entries over a 256 MiB stream would have taken hours.  Overlap is refused before any
    // entry is inflated.
    std::vector<ZipEntry> entries = torchEntries();
    ASSERT_NO_THROW(GraphModelLoader::fromBytes(makeZip(entries)));
    for (int target : {1, 0}) { // the deflated code, the stored data
        std::vector<ZipEntry> aliased = entries;
        ZipEntry alias;
        alias.name = "m/code/__torch__/alias.py";
        alias.aliasOf = target;
        aliased.push_back(alias);
        expectTorchRejected(makeZip(aliased), {"the zip entry '", "overlaps the zip entry '", "the same bytes"});
    }
    // Many aliases: refused as fast as one (no entry inflated).
    std::vector<ZipEntry> many = entries;
    for (int k = 0; k < 5000; k++) {
        ZipEntry alias;
        alias.name = "m/code/__torch__/alias" + std::to_string(k) + ".py";
        alias.aliasOf = 1;
        many.push_back(alias);
    }
    expectTorchRejected(makeZip(many), {"overlaps the zip entry '"});
}

TEST(GraphModelLoader, TorchScriptArchiveEntriesMustMatchTheirCrc) {
    const std::string good = makeZip(torchEntries());
    ASSERT_NO_THROW(GraphModelLoader::fromBytes(good));
    // One flipped byte in each kind of entry (stored data, deflated code of each block type, the metadata itself).
    const std::vector<std::pair<std::string, std::string>> targets = {{TorchData, "m/data.pkl"},
                                                                      {DynamicDeflated, "m/code/__torch__/m.py"},
                                                                      {FixedDeflated, "m/code/__torch__/fixed.py"},
                                                                      {"def stored()", "m/code/__torch__/stored.py"},
                                                                      {"openmm-graph-torch", "m/extra/openmmgraph.json"}};
    for (const auto& target : targets) {
        const size_t at = good.find(target.first);
        ASSERT_NE(at, std::string::npos) << target.second;
        // (Not the last byte of a deflate stream: its high bits can be padding after the end-of-block code.)
        for (size_t offset : {size_t(0), target.first.size() / 2}) {
            std::string bytes = good;
            bytes[at + offset] ^= 0x10;
            expectTorchRejected(bytes, {"GraphForce: TorchScript model: the zip entry '" + target.second + "' is corrupt"});
        }
    }
    // The review's case: a flipped byte in the stored data says it is the CRC-32 that does not match.
    std::string flipped = good;
    flipped[good.find(TorchData) + 100] ^= 0xFF;
    expectTorchRejected(flipped, {"'m/data.pkl'", "CRC-32", "damaged"});
    // A recorded size that disagrees with the data.
    std::vector<ZipEntry> entries = torchEntries();
    entries[1].recordedSize = 599;
    expectTorchRejected(makeZip(entries), {"'m/code/__torch__/m.py'", "more than the 599 bytes"});
    entries = torchEntries();
    entries[1].recordedSize = 601;
    expectTorchRejected(makeZip(entries), {"'m/code/__torch__/m.py'", "inflates to 600 bytes", "601"});
    entries = torchEntries();
    entries[0].recordedSize = 10;
    expectTorchRejected(makeZip(entries), {"'m/data.pkl'", "stored"});
    entries = torchEntries();
    entries[1].recordedSize = 1LL << 31;
    expectTorchRejected(makeZip(entries), {"'m/code/__torch__/m.py'", "2147483648 bytes of content for 211 deflated bytes"});
    // Deflate streams that are not: a reserved block type, a truncated stream, a bad stored-block length.
    entries = torchEntries();
    entries[2].deflated = std::string(1, '\x07') + FixedDeflated.substr(1);
    expectTorchRejected(makeZip(entries), {"'m/code/__torch__/fixed.py'", "invalid block type"});
    entries = torchEntries();
    entries[1].deflated = DynamicDeflated.substr(0, 100);
    expectTorchRejected(makeZip(entries), {"'m/code/__torch__/m.py'", "ends early"});
    entries = torchEntries();
    entries[3].deflated[3] ^= 1;
    expectTorchRejected(makeZip(entries), {"'m/code/__torch__/stored.py'", "invalid stored block lengths"});
    entries = torchEntries();
    entries[1].deflated += "junk";
    expectTorchRejected(makeZip(entries), {"'m/code/__torch__/m.py'", "4 bytes after the end of its deflated data"});
    // Methods other than stored and deflated, and encrypted entries, cannot be checked: refused.
    entries = torchEntries();
    entries[1].method = 12;
    expectTorchRejected(makeZip(entries), {"'m/code/__torch__/m.py'", "compression method 12"});
    std::string encrypted = makeZip(torchEntries());
    const size_t central = encrypted.find(std::string("PK\x01\x02", 4));
    encrypted[central + 8] = 1;
    expectTorchRejected(encrypted, {"'m/data.pkl'", "encrypted"});
    // Entry names in messages are printable ASCII (a message must stay valid UTF-8).
    entries = torchEntries();
    entries[0].name = "m/d\xE7ta.pkl";
    entries[0].method = 12;
    expectTorchRejected(makeZip(entries), {"'m/d\\xE7ta.pkl'"});
    // The metadata entry must still be stored, even though deflated entries are understood.
    entries = torchEntries();
    entries[4].method = 8;
    entries[4].deflated = storedBlock(entries[4].content);
    expectTorchRejected(makeZip(entries), {"'m/extra/openmmgraph.json' is compressed"});
}

TEST(GraphModelLoader, TorchScriptMetadataIsRangeChecked) {
    auto withTypes = [](const std::string& types) { return makeZip(torchEntries(torchMetadata(types))); };
    auto withExtra = [](const std::string& extra) {
        return makeZip(torchEntries(torchMetadata("[{\"name\": \"H\", \"atomic_number\": 1}]", extra)));
    };
    expectTorchRejected(withTypes("[{\"name\": \"H\", \"atomic_number\": 1}, {\"name\": \"H\", \"atomic_number\": 1}]"),
                        {"'types'", "expected unique names", "\"H\" twice"});
    expectTorchRejected(withTypes("[{\"name\": \"\", \"atomic_number\": 1}]"), {"'types'", "non-empty"});
    for (const std::string z : {"1e300", "-1e300", "-1", "119", "6.5", "2147483648"})
        expectTorchRejected(withTypes("[{\"name\": \"H\", \"atomic_number\": " + z + "}]"),
                            {"'types'", "\"H\" atomic_number", "[0, 118]", z});
    for (const std::string n : {"1e300", "-1e300", "2", "-1", "0.5", "4294967296"})
        expectTorchRejected(withExtra(", \"n_interactions\": " + n), {"'n_interactions'", "an integer in [0, 1]", n});
    expectTorchRejected(withExtra(", \"n_interactions\": true"), {"'n_interactions'", "expected a number"});
    const std::string metadata = torchMetadata();
    expectTorchRejected(makeZip(torchEntries(std::string(metadata).replace(metadata.find("0.1"), 3, "1e300"))),
                        {"'length_scale_nm'", "disagrees"});
    expectTorchRejected(withExtra(", \"energy_scale_kj_per_mol\": -1e300"), {"'energy_scale_kj_per_mol'", "disagrees"});
    EXPECT_EQ(GraphModelLoader::fromBytes(withExtra(", \"n_interactions\": 0"))->numInteractions, 0);
    expectTorchRejected(makeZip(torchEntries(torchMetadata().replace(torchMetadata().find("5.0"), 3, "1e999"))), {"'cutoff'"});
}

TEST(GraphModelLoader, FuzzedTorchScriptArchivesNeverCrash) {
    // 3,000 mutations of a small archive: every outcome is a model or an OpenMMException.  A changed byte of a stored entry's
    // data is always found (by its CRC-32); what is accepted is a changed byte in a field that nothing reads (a time, a
    // version, the local copy of a size) or in the padding bits at the end of a deflate stream.
    const std::string good = makeZip(torchEntries());
    const std::vector<std::pair<size_t, size_t>> storedData = {{good.find(TorchData), TorchData.size()},
                                                               {good.find(torchMetadata()), torchMetadata().size()}};
    std::mt19937_64 rng(7);
    int accepted = 0, rejected = 0;
    for (int c = 0; c < 3000; c++) {
        std::string bytes = good;
        bool flip = false;
        size_t flipped = 0;
        switch (rng() % 4) {
        case 0:
        case 1:
            flip = true;
            flipped = rng() % bytes.size();
            bytes[flipped] ^= (char) (1 + rng() % 255);
            break;
        case 2:
            bytes.resize(rng() % bytes.size());
            break;
        case 3:
            bytes.erase(rng() % bytes.size(), 1 + rng() % 8);
            break;
        }
        try {
            GraphModelLoader::fromBytes(bytes);
            accepted++;
            ASSERT_TRUE(flip) << "a truncated or shortened archive was accepted";
            for (const auto& data : storedData)
                ASSERT_FALSE(flipped >= data.first && flipped < data.first + data.second)
                    << "a changed byte at " << flipped << " was accepted";
        }
        catch (const OpenMMException&) {
            rejected++;
        }
    }
    EXPECT_GT(rejected, 2400);
    std::printf("zip fuzz: %d accepted, %d rejected\n", accepted, rejected);
}

TEST(GraphModelLoader, FileErrorsNameThePath) {
    // A directory.
    const std::string directory = testing::TempDir();
    try {
        GraphForce force(directory);
        ADD_FAILURE() << "a directory was accepted";
    }
    catch (const OpenMMException& e) {
        EXPECT_NE(std::string(e.what()).find("'" + directory + "' is a directory"), std::string::npos) << e.what();
    }
    // A damaged model file and a damaged TorchScript archive: the loader's message, with the path.
    const std::string path = testing::TempDir() + "graph_model_loader_bad.safetensors";
    std::ofstream(path, std::ios::binary) << "abc";
    try {
        GraphForce force(path);
        ADD_FAILURE() << "a 3-byte file was accepted";
    }
    catch (const OpenMMException& e) {
        EXPECT_EQ(std::string(e.what()).find("GraphForce: model file '" + path + "': the file is 3 bytes long"), 0u) << e.what();
    }
    std::string archive = makeZip(torchEntries());
    archive[archive.find(TorchData) + 7] ^= 1;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << archive;
    try {
        GraphForce force(path);
        ADD_FAILURE() << "a damaged archive was accepted";
    }
    catch (const OpenMMException& e) {
        EXPECT_EQ(std::string(e.what()).find("GraphForce: TorchScript model '" + path + "': the zip entry 'm/data.pkl' is corrupt"), 0u)
            << e.what();
    }
    std::remove(path.c_str());
}

TEST(GraphModelLoader, StreamsThatAreNoModelAreRefusedAtOnce) {
    // /dev/zero was read until memory ran out (then "std::bad_alloc"): a stream that is not a regular file must begin
    // a model in its first 8 bytes.
    for (const std::string device : {"/dev/zero", "/dev/urandom"}) {
        if (!std::filesystem::exists(device))
            continue;
        try {
            GraphForce force(device);
            ADD_FAILURE() << device << " was accepted";
        }
        catch (const OpenMMException& e) {
            EXPECT_EQ(
                std::string(e.what()).find("GraphForce: the model file '" + device + "' is not a regular file, and its first 8 bytes"), 0u)
                << e.what();
            EXPECT_NE(std::string(e.what()).find("stopped reading there"), std::string::npos) << e.what();
        }
    }
    // A model through a FIFO (a pipe, as from `<(...)`) is still read whole.
    const std::string fifo = testing::TempDir() + "graph_model_loader_fifo";
    std::remove(fifo.c_str());
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    const std::string bytes = GraphTest::makeModelBytes(smallOptions());
    std::thread writer([&] { std::ofstream(fifo, std::ios::binary) << bytes; });
    std::unique_ptr<GraphForce> force;
    EXPECT_NO_THROW(force.reset(new GraphForce(fifo)));
    writer.join();
    if (force)
        EXPECT_EQ(force->getModelBytes(), bytes);
    std::remove(fifo.c_str());
}

TEST(GraphModelLoader, CudaChunkRowsIsExactlyADecimalWholeNumber) {
    GraphForce* force = GraphForce::fromModelBytes(GraphTest::makeModelBytes(smallOptions()));
    for (const std::string value : {"1", "5", "05", "2147483647", "auto"}) {
        EXPECT_NO_THROW(force->setProperty("CudaChunkRows", value)) << value;
        EXPECT_EQ(force->getProperty("CudaChunkRows"), value);
    }
    for (const std::string value :
         {" 5", "+5", "5 ", "\t5", "0x5", "5.0", "5e0", "", "-", "0", "-5", "2147483648", "99999999999999999999", "5a", "Auto"}) {
        try {
            force->setProperty("CudaChunkRows", value);
            ADD_FAILURE() << "CudaChunkRows \"" << value << "\" was accepted";
        }
        catch (const OpenMMException& e) {
            EXPECT_NE(std::string(e.what()).find("found " + quotedText(value)), std::string::npos) << e.what();
        }
    }
    EXPECT_EQ(force->getProperty("CudaChunkRows"), "auto");
    delete force;
}
