#include "internal/GraphModelLoader.h"
#include "JsonValue.h"
#include "ZipArchive.h"
#include "internal/QuotedText.h"
#include "openmm/OpenMMException.h"
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

using namespace GraphPlugin;
using OpenMM::OpenMMException;

namespace {

/** Plain decimal numbers as docs/model-format.md allows them: [+-]digits[.digits][e[+-]digits] (no hex, nan or inf). */
bool isDecimalNumber(const std::string& text, bool integerOnly) {
    size_t i = 0, n = text.size();
    if (i < n && (text[i] == '+' || text[i] == '-'))
        i++;
    size_t digits = 0;
    while (i < n && std::isdigit((unsigned char) text[i]))
        i++, digits++;
    if (integerOnly)
        return digits > 0 && i == n;
    if (i < n && text[i] == '.') {
        i++;
        while (i < n && std::isdigit((unsigned char) text[i]))
            i++, digits++;
    }
    if (digits == 0)
        return false;
    if (i < n && (text[i] == 'e' || text[i] == 'E')) {
        i++;
        if (i < n && (text[i] == '+' || text[i] == '-'))
            i++;
        size_t exponentDigits = 0;
        while (i < n && std::isdigit((unsigned char) text[i]))
            i++, exponentDigits++;
        if (exponentDigits == 0)
            return false;
    }
    return i == n;
}

const uint64_t MaxHeaderBytes = 100 * 1024 * 1024;
const int MaxTypes = 256;
const int MaxChannels = 4096;
const int MaxIntervals = 1 << 20;
const int MaxLayers = 64;
const int MaxWidth = 1 << 16;

/** The safetensors header length: the file's first 8 bytes, little-endian (the caller checks there are 8). */
uint64_t headerLength(const std::string& bytes) {
    uint64_t length = 0;
    for (int i = 7; i >= 0; i--)
        length = (length << 8) | (unsigned char) bytes[i];
    return length;
}

[[noreturn]] void fail(const std::string& message) {
    throw OpenMMException("GraphForce: model file: " + fileErrorText(message));
}

template <class T> std::string str(const T& value) {
    std::stringstream s;
    s << value;
    return s.str();
}

/** The shortest decimal text that reads back as exactly this double (0.6, not 0.59999999999999998). */
std::string str(double value) {
    for (int digits = 1;; digits++) {
        std::stringstream s;
        s.precision(digits);
        s << value;
        if (digits == 17 || std::strtod(s.str().c_str(), nullptr) == value)
            return s.str();
    }
}

std::string shapeString(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

/** One tensor entry of the safetensors header, located in the data buffer. */
struct TensorEntry {
    std::string name;
    bool isFloat32 = false;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;
};

/**
 * Reads and checks a safetensors file and its metadata; builds the GraphModel.
 */
class Loader {
public:
    explicit Loader(const std::string& bytes) : bytes(bytes) {}

    std::shared_ptr<const GraphModel> load() {
        parseContainer();
        parseMetadata();
        auto model = std::make_shared<GraphModel>();
        m = model.get();
        fillMetadata();
        readTensors();
        checkNoExtraTensors();
        convertUnits();
        return model;
    }

private:
    const std::string& bytes;
    uint64_t dataStart = 0, dataSize = 0;
    std::map<std::string, std::string> metadata;
    std::map<std::string, TensorEntry> tensors;
    std::set<std::string> consumed;
    GraphModel* m = nullptr;
    int numFloat32 = 0, numTensorsRead = 0;
    std::vector<bool> fittingResidual, nodeResidual;

    // ---------------------------------------------------------------- container

    void parseContainer() {
        if (bytes.size() < 8)
            fail("the file is " + str(bytes.size()) + " bytes long; a safetensors file starts with an 8-byte header length");
        uint64_t headerSize = headerLength(bytes);
        uint64_t available = bytes.size() - 8;
        if (headerSize == 0 || headerSize > available || headerSize > MaxHeaderBytes)
            fail("header length: " +
                 (available == 0 ? "found " + str(headerSize) + ", but the file ends after these 8 bytes"
                                 : "expected 1 to " + str(std::min<uint64_t>(available, MaxHeaderBytes)) +
                                       " bytes (the rest of the file), found " + str(headerSize)) +
                 " (truncated or not a safetensors file)");
        dataStart = 8 + headerSize;
        dataSize = bytes.size() - dataStart;
        JsonValue header = JsonValue::parse(bytes.data() + 8, headerSize, "the safetensors header");
        if (header.kind != JsonValue::Kind::Object)
            fail("the safetensors header: expected a JSON object, found " + std::string(JsonValue::kindName(header.kind)));
        bool haveMetadata = false;
        for (const std::string& key : header.keyOrder) {
            const JsonValue& value = header.object.at(key);
            if (key == "__metadata__") {
                if (value.kind != JsonValue::Kind::Object)
                    fail("__metadata__: expected an object of strings, found " + std::string(JsonValue::kindName(value.kind)));
                for (const std::string& metaKey : value.keyOrder) {
                    const JsonValue& metaValue = value.object.at(metaKey);
                    if (metaValue.kind != JsonValue::Kind::String)
                        fail("metadata key '" + metaKey + "': expected a string value, found " + JsonValue::kindName(metaValue.kind));
                    metadata[metaKey] = metaValue.string;
                }
                haveMetadata = true;
                continue;
            }
            tensors[key] = parseTensorEntry(key, value);
        }
        if (!haveMetadata)
            fail("__metadata__: expected the metadata object of docs/model-format.md, found none");
        checkOffsets();
    }

    TensorEntry parseTensorEntry(const std::string& name, const JsonValue& value) {
        TensorEntry entry;
        entry.name = name;
        if (value.kind != JsonValue::Kind::Object)
            fail("tensor '" + name + "': expected an object with dtype, shape and data_offsets, found " + JsonValue::kindName(value.kind));
        for (const std::string& key : value.keyOrder)
            if (key != "dtype" && key != "shape" && key != "data_offsets")
                fail("tensor '" + name + "': unexpected field '" + key + "' (expected dtype, shape and data_offsets)");
        for (const char* key : {"dtype", "shape", "data_offsets"})
            if (!value.object.count(key))
                fail("tensor '" + name + "': missing field '" + key + "'");
        const JsonValue& dtype = value.object.at("dtype");
        if (dtype.kind != JsonValue::Kind::String || (dtype.string != "F32" && dtype.string != "F64"))
            fail("tensor '" + name + "': dtype expected \"F64\" or \"F32\", found " +
                 (dtype.kind == JsonValue::Kind::String ? "\"" + dtype.string + "\"" : std::string(JsonValue::kindName(dtype.kind))));
        entry.isFloat32 = dtype.string == "F32";
        const JsonValue& shape = value.object.at("shape");
        if (shape.kind != JsonValue::Kind::Array || shape.array.size() > 8)
            fail("tensor '" + name + "': shape expected an array of at most 8 non-negative integers");
        for (const JsonValue& dim : shape.array)
            entry.shape.push_back(exactInteger(dim, "tensor '" + name + "' shape", 0, 1LL << 40));
        const JsonValue& offsets = value.object.at("data_offsets");
        if (offsets.kind != JsonValue::Kind::Array || offsets.array.size() != 2)
            fail("tensor '" + name + "': data_offsets expected [begin, end]");
        entry.begin = exactInteger(offsets.array[0], "tensor '" + name + "' data_offsets", 0, 1LL << 62);
        entry.end = exactInteger(offsets.array[1], "tensor '" + name + "' data_offsets", 0, 1LL << 62);
        uint64_t numElements = 1;
        for (int64_t dim : entry.shape) {
            if (dim != 0 && numElements > (1ULL << 40) / (uint64_t) dim)
                fail("tensor '" + name + "': shape " + shapeString(entry.shape) + " is too large");
            numElements *= dim;
        }
        uint64_t expectedBytes = numElements * (entry.isFloat32 ? 4 : 8);
        if (entry.end < entry.begin || entry.end - entry.begin != expectedBytes)
            fail("tensor '" + name + "': data_offsets [" + str(entry.begin) + ", " + str(entry.end) + "] expected to span " +
                 str(expectedBytes) + " bytes for shape " + shapeString(entry.shape) + " and dtype " + dtype.string);
        if (entry.end > dataSize)
            fail("tensor '" + name + "': data_offsets end " + str(entry.end) + " is beyond the " + str(dataSize) +
                 " bytes of data in the file (truncated file?)");
        return entry;
    }

    static int64_t exactInteger(const JsonValue& value, const std::string& what, int64_t low, int64_t high) {
        if (value.kind != JsonValue::Kind::Number || value.numberText.find_first_of(".eE") != std::string::npos ||
            value.numberText.size() > 19 || value.number < (double) low || value.number > (double) high)
            fail(what + ": expected an integer in [" + str(low) + ", " + str(high) + "], found " +
                 (value.kind == JsonValue::Kind::Number ? value.numberText : std::string(JsonValue::kindName(value.kind))));
        return std::strtoll(value.numberText.c_str(), nullptr, 10);
    }

    /** The tensors must tile the data buffer exactly, in order, with no gap or overlap. */
    void checkOffsets() {
        std::vector<const TensorEntry*> order;
        for (auto& t : tensors)
            order.push_back(&t.second);
        std::sort(order.begin(), order.end(),
                  [](const TensorEntry* a, const TensorEntry* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
        uint64_t expected = 0;
        const TensorEntry* previous = nullptr;
        auto span = [&](const TensorEntry* t) { return "'" + t->name + "' [" + str(t->begin) + ", " + str(t->end) + "]"; };
        for (const TensorEntry* t : order) {
            if (t->begin < expected)
                fail("tensors " + span(previous) + " and " + span(t) +
                     " overlap (data_offsets; tensors must tile the data without gaps or overlaps)");
            if (t->begin > expected)
                fail("tensor " + span(t) + ": a gap of " + str(t->begin - expected) +
                     " bytes before it (data_offsets; tensors must tile the data without gaps or overlaps)");
            expected = t->end;
            previous = t;
        }
        if (expected != dataSize)
            fail("data size: expected " + str(expected) + " bytes after the header (the end of the last tensor), found " + str(dataSize));
    }

    // ---------------------------------------------------------------- metadata

    void parseMetadata() {
        static const std::set<std::string> required = {
            "format",    "format_version", "length_unit",      "energy_unit", "type_names",       "type_atomic_numbers",
            "cutoff",    "n_channels",     "n_axis",           "l_max",       "descriptor_l_sum", "n_norm",
            "radial_r0", "radial_dr",      "radial_intervals", "activation",  "fitting_residual", "n_interactions"};
        for (auto& entry : metadata)
            if (!required.count(entry.first) && entry.first != "node_residual")
                fail("metadata key '" + entry.first + "': not a key of format version 1 (unexpected key)");
        for (const std::string& key : required)
            if (!metadata.count(key))
                fail("metadata key '" + key + "': missing (expected by format version 1)");
    }

    const std::string& meta(const std::string& key) {
        return metadata.at(key);
    }

    long long metaInteger(const std::string& key, long long low, long long high) {
        const std::string& text = meta(key);
        char* end = nullptr;
        errno = 0;
        bool plain = isDecimalNumber(text, true);
        long long value = plain ? std::strtoll(text.c_str(), &end, 10) : 0;
        if (!plain || *end != '\0' || errno != 0 || value < low || value > high)
            fail("metadata key '" + key + "': expected an integer in [" + str(low) + ", " + str(high) + "], found \"" + text + "\"");
        return value;
    }

    double metaReal(const std::string& key, double low, bool lowInclusive) {
        const std::string& text = meta(key);
        char* end = nullptr;
        bool plain = isDecimalNumber(text, false);
        double value = plain ? std::strtod(text.c_str(), &end) : 0;
        bool ok = plain && *end == '\0' && std::isfinite(value) && (lowInclusive ? value >= low : value > low);
        if (!ok)
            fail("metadata key '" + key + "': expected a finite number " + (lowInclusive ? ">= " : "> ") + str(low) + ", found \"" + text +
                 "\"");
        return value;
    }

    bool metaBool(const std::string& key) {
        const std::string& text = meta(key);
        if (text != "true" && text != "false")
            fail("metadata key '" + key + "': expected \"true\" or \"false\", found \"" + text + "\"");
        return text == "true";
    }

    JsonValue metaJsonArray(const std::string& key, const std::string& expected) {
        const std::string& text = meta(key);
        JsonValue value = JsonValue::parse(text.data(), text.size(), "metadata key '" + key + "'");
        if (value.kind != JsonValue::Kind::Array)
            fail("metadata key '" + key + "': expected " + expected + ", found \"" + text + "\"");
        return value;
    }

    std::vector<bool> metaBoolList(const std::string& key) {
        JsonValue list = metaJsonArray(key, "a JSON list of booleans, one per hidden layer");
        if (list.array.size() > MaxLayers)
            fail("metadata key '" + key + "': expected at most " + str(MaxLayers) + " layers, found " + str(list.array.size()));
        std::vector<bool> result;
        for (const JsonValue& v : list.array) {
            if (v.kind != JsonValue::Kind::Bool)
                fail("metadata key '" + key + "': expected a JSON list of booleans, found \"" + meta(key) + "\"");
            result.push_back(v.boolean);
        }
        return result;
    }

    void fillMetadata() {
        if (meta("format") != "openmm-graph")
            fail("metadata key 'format': expected \"openmm-graph\", found \"" + meta("format") + "\"");
        if (meta("format_version") != "1")
            fail("metadata key 'format_version': expected \"1\" (this reader knows version 1), found \"" + meta("format_version") + "\"");
        m->lengthUnit = meta("length_unit");
        if (!GraphModelLoader::unitScale(m->lengthUnit, true, m->lengthScale))
            fail("metadata key 'length_unit': expected one of nm, angstrom, bohr, found \"" + m->lengthUnit + "\"");
        m->energyUnit = meta("energy_unit");
        if (!GraphModelLoader::unitScale(m->energyUnit, false, m->energyScale))
            fail("metadata key 'energy_unit': expected one of kJ/mol, kcal/mol, eV, hartree, found \"" + m->energyUnit + "\"");

        JsonValue names = metaJsonArray("type_names", "a JSON list of type names");
        if (names.array.empty() || names.array.size() > MaxTypes)
            fail("metadata key 'type_names': expected 1 to " + str(MaxTypes) + " names, found " + str(names.array.size()));
        std::set<std::string> seen;
        for (const JsonValue& name : names.array) {
            if (name.kind != JsonValue::Kind::String || name.string.empty())
                fail("metadata key 'type_names': expected non-empty strings, found \"" + meta("type_names") + "\"");
            if (!seen.insert(name.string).second)
                fail("metadata key 'type_names': expected unique names, found \"" + name.string + "\" twice");
            m->typeNames.push_back(name.string);
        }
        m->numTypes = (int) m->typeNames.size();
        JsonValue numbers = metaJsonArray("type_atomic_numbers", "a JSON list of integers");
        if ((int) numbers.array.size() != m->numTypes)
            fail("metadata key 'type_atomic_numbers': expected " + str(m->numTypes) +
                 " entries (one per entry of 'type_names', which lists " + str(m->numTypes) + " names), found " +
                 str(numbers.array.size()));
        for (const JsonValue& number : numbers.array)
            m->typeAtomicNumbers.push_back((int) exactInteger(number, "metadata key 'type_atomic_numbers'", 0, 118));

        m->cutoff = metaReal("cutoff", 0.0, false);
        m->numChannels = (int) metaInteger("n_channels", 1, MaxChannels);
        m->numAxis = (int) metaInteger("n_axis", 1, m->numChannels);
        m->lMax = (int) metaInteger("l_max", 0, 2);
        m->descriptorLSum = metaBool("descriptor_l_sum");
        m->nNorm = metaReal("n_norm", 0.0, false);
        m->radialR0 = metaReal("radial_r0", 0.0, true);
        if (!(m->radialR0 < m->cutoff))
            fail("metadata key 'radial_r0': expected a number < cutoff (" + str(m->cutoff) + "), found " + meta("radial_r0"));
        m->radialDr = metaReal("radial_dr", 0.0, false);
        m->radialIntervals = (int) metaInteger("radial_intervals", 1, MaxIntervals);
        double tableEnd = m->radialR0 + m->radialIntervals * m->radialDr;
        if (std::abs(tableEnd - m->cutoff) > 1e-9 * m->cutoff)
            fail("metadata keys 'radial_r0', 'radial_dr', 'radial_intervals': expected r_0 + K * dr = cutoff = " + str(m->cutoff) +
                 ", found " + str(tableEnd));
        if (meta("activation") == "tanh")
            m->activation = Activation::Tanh;
        else if (meta("activation") == "silu")
            m->activation = Activation::Silu;
        else
            fail("metadata key 'activation': expected \"tanh\" or \"silu\", found \"" + meta("activation") + "\"");
        fittingResidual = metaBoolList("fitting_residual");
        m->numInteractions = (int) metaInteger("n_interactions", 0, 1);
        if (m->numInteractions == 1) {
            if (!metadata.count("node_residual"))
                fail("metadata key 'node_residual': missing (expected when n_interactions is 1)");
            nodeResidual = metaBoolList("node_residual");
        }
        else if (metadata.count("node_residual"))
            fail("metadata key 'node_residual': unexpected when n_interactions is 0");
    }

    // ---------------------------------------------------------------- tensors

    const TensorEntry& tensor(const std::string& name, const std::vector<int64_t>& expectedShape) {
        auto it = tensors.find(name);
        if (it == tensors.end())
            fail("tensor '" + name + "': missing (expected shape " + shapeString(expectedShape) + ")");
        if (it->second.shape != expectedShape)
            fail("tensor '" + name + "': expected shape " + shapeString(expectedShape) + ", found " + shapeString(it->second.shape));
        consumed.insert(name);
        return it->second;
    }

    std::vector<double> values(const TensorEntry& entry) {
        numTensorsRead++;
        if (entry.isFloat32)
            numFloat32++;
        size_t count = (entry.end - entry.begin) / (entry.isFloat32 ? 4 : 8);
        std::vector<double> result(count);
        const char* data = bytes.data() + dataStart + entry.begin;
        for (size_t i = 0; i < count; i++) {
            double v;
            if (entry.isFloat32) {
                float f;
                std::memcpy(&f, data + 4 * i, 4);
                v = f;
            }
            else
                std::memcpy(&v, data + 8 * i, 8);
            if (!std::isfinite(v))
                fail("tensor '" + entry.name + "': expected finite values, found " + str(v) + " at flat index " + str(i));
            result[i] = v;
        }
        return result;
    }

    std::vector<double> readTable(const std::string& name) {
        int T = m->numTypes, L = m->lMax, K = m->radialIntervals, M = m->numChannels;
        std::vector<double> table = values(tensor(name, {T, T, L + 1, K + 1, 3, M}));
        for (int a = 0; a < T; a++)
            for (int b = 0; b < T; b++)
                for (int l = 0; l <= L; l++)
                    for (int c = 0; c < 3; c++)
                        for (int k = 0; k < M; k++) {
                            double v = table[m->tableOffset(a, b, l, K) + c * M + k];
                            if (v != 0.0)
                                fail("tensor '" + name + "': expected f = f' = f'' = 0 at the cut-off (knot K = " + str(K) + "), found " +
                                     (c == 0   ? "f"
                                      : c == 1 ? "f'"
                                               : "f''") +
                                     " = " + str(v) + " at [" + str(a) + ", " + str(b) + ", " + str(l) + ", " + str(K) + ", " + str(c) +
                                     ", " + str(k) + "]");
                        }
        return table;
    }

    /** A dense layer; `outputs` is its required width, or 0 when the file decides. */
    DenseLayer readLayer(const std::string& prefix, int numInputs, bool residual, int outputs) {
        DenseLayer layer;
        layer.numInputs = numInputs;
        layer.residual = residual;
        auto it = tensors.find(prefix + ".weight");
        if (it == tensors.end())
            fail("tensor '" + prefix + ".weight': missing (expected shape [" + (outputs == 0 ? std::string("width") : str(outputs)) + ", " +
                 str(numInputs) + "])");
        const std::vector<int64_t>& shape = it->second.shape;
        int numOutputs = outputs;
        if (outputs == 0) {
            if (shape.size() != 2 || shape[0] < 1 || shape[0] > MaxWidth)
                fail("tensor '" + prefix + ".weight': expected shape [width, " + str(numInputs) + "] with 1 <= width <= " + str(MaxWidth) +
                     ", found " + shapeString(shape));
            numOutputs = (int) shape[0];
        }
        layer.numOutputs = numOutputs;
        layer.weight = values(tensor(prefix + ".weight", {numOutputs, numInputs}));
        layer.bias = values(tensor(prefix + ".bias", {numOutputs}));
        if (residual && numOutputs != numInputs)
            fail("tensor '" + prefix + ".weight': a residual layer needs as many outputs as inputs, expected shape [" + str(numInputs) +
                 ", " + str(numInputs) + "], found " + shapeString(shape));
        std::string timestepName = prefix + ".timestep";
        if (tensors.count(timestepName)) {
            if (!residual)
                fail("tensor '" + timestepName + "': unexpected (timesteps belong to residual layers only)");
            layer.timestep = values(tensor(timestepName, {numOutputs}));
        }
        else if (residual)
            layer.timestep.assign(numOutputs, 1.0);
        return layer;
    }

    DenseNetwork readNetwork(const std::string& prefix, const std::vector<bool>& residual, int numInputs, int numFinalOutputs) {
        DenseNetwork network;
        int width = numInputs;
        for (size_t n = 0; n < residual.size(); n++) {
            network.hidden.push_back(readLayer(prefix + "." + str(n), width, residual[n], 0));
            width = network.hidden.back().numOutputs;
        }
        network.output = readLayer(prefix + ".out", width, false, numFinalOutputs);
        return network;
    }

    void readTensors() {
        m->radialTable = readTable("radial.table");
        for (int a = 0; a < m->numTypes; a++)
            m->fitting.push_back(readNetwork("fitting." + str(a), fittingResidual, m->fittingInputSize(), 1));
        m->energyShift = values(tensor("energy_shift", {m->numTypes}));
        if (m->numInteractions == 1) {
            m->interactionTable = readTable("interaction.radial.table");
            for (int a = 0; a < m->numTypes; a++)
                m->node.push_back(readNetwork("node." + str(a), nodeResidual, m->descriptorSize(), m->numChannels));
        }
        m->fileIsFloat32 = numFloat32 > 0 && numFloat32 == numTensorsRead;
    }

    void checkNoExtraTensors() {
        for (auto& t : tensors)
            if (!consumed.count(t.first))
                fail("tensor '" + t.first + "': not a tensor of this model (unexpected name for T = " + str(m->numTypes) +
                     ", n_interactions = " + str(m->numInteractions) + ", " + str(fittingResidual.size()) + " fitting layers)");
    }

    // ---------------------------------------------------------------- units

    /** Convert lengths to nm and energies to kJ/mol (see GraphModel). */
    void convertUnits() {
        double ls = m->lengthScale, es = m->energyScale;
        m->cutoff *= ls;
        m->radialR0 *= ls;
        m->radialDr *= ls;
        for (std::vector<double>* table : {&m->radialTable, &m->interactionTable}) {
            if (table->empty())
                continue;
            size_t knots = table->size() / (3 * m->numChannels);
            for (size_t q = 0; q < knots; q++)
                for (int k = 0; k < m->numChannels; k++) {
                    (*table)[(q * 3 + 1) * m->numChannels + k] /= ls;
                    (*table)[(q * 3 + 2) * m->numChannels + k] /= ls * ls;
                }
        }
        for (DenseNetwork& network : m->fitting) {
            for (double& w : network.output.weight)
                w *= es;
            for (double& b : network.output.bias)
                b *= es;
        }
        for (double& shift : m->energyShift)
            shift *= es;
        // Finite values in the file's units can overflow in OpenMM's (a second derivative of 1e307 per angstrom^2 is
        // 1e309 per nm^2): found here, naming the tensor, not as a non-finite force at the first step.
        auto requireFinite = [](const std::vector<double>& values, const std::string& name, const char* units) {
            for (size_t i = 0; i < values.size(); i++)
                if (!std::isfinite(values[i]))
                    fail("tensor '" + name + "': value " + str(i) + " is beyond the double range in OpenMM's units (" + units +
                         "); rescale the model");
        };
        requireFinite(m->radialTable, "radial.table", "nm");
        requireFinite(m->interactionTable, "interaction.radial.table", "nm");
        for (size_t a = 0; a < m->fitting.size(); a++) {
            requireFinite(m->fitting[a].output.weight, "fitting." + str(a) + ".out.weight", "kJ/mol");
            requireFinite(m->fitting[a].output.bias, "fitting." + str(a) + ".out.bias", "kJ/mol");
        }
        requireFinite(m->energyShift, "energy_shift", "kJ/mol");
    }
};

} // namespace

std::shared_ptr<const GraphModel> GraphModelLoader::fromBytes(const std::string& bytes) {
    // "PK\x03\x04" can also be the low half of a safetensors header length (0x04034B50 bytes, under the 100 MiB
    // limit): such a file is a safetensors file when that length fits the file and its JSON header starts after it.
    const bool safetensors = bytes.size() > 8 && headerLength(bytes) <= bytes.size() - 8 && bytes[8] == '{';
    if (ZipArchive::looksLikeZip(bytes) && !safetensors)
        return fromTorchScriptBytes(bytes);
    return Loader(bytes).load();
}

bool GraphModelLoader::unitScale(const std::string& unit, bool length, double& scale) {
    static const std::map<std::string, double> lengths = {{"nm", 1.0}, {"angstrom", 0.1}, {"bohr", 0.052917721090}};
    static const std::map<std::string, double> energies = {
        {"kJ/mol", 1.0}, {"kcal/mol", 4.184}, {"eV", 96.48533212331}, {"hartree", 2625.4996394799}};
    const auto& table = length ? lengths : energies;
    auto it = table.find(unit);
    if (it == table.end())
        return false;
    scale = it->second;
    return true;
}

std::string GraphModelLoader::readFile(const std::string& path) {
    std::error_code error;
    if (std::filesystem::is_directory(path, error))
        throw OpenMMException("GraphForce: the model file '" + path + "' is a directory, not a file");
    std::ifstream file(path, std::ios::binary);
    if (!file)
        throw OpenMMException(
            "GraphForce: cannot open the model file '" + path + "'" +
            (std::filesystem::exists(path, error) ? " (it exists but cannot be read; check its permissions)" : ": there is no such file"));
    // A stream that is not a regular file (a FIFO, a device) has no size to check beforehand: its first 8 bytes must
    // begin a model, a safetensors header length of 1 to MaxHeaderBytes or a zip archive (TorchScript, AOTI), so that
    // /dev/zero or /dev/urandom is refused at once instead of read until memory runs out.
    std::string content;
    try {
        if (!std::filesystem::is_regular_file(path, error)) {
            char head[8];
            file.read(head, 8);
            content.assign(head, (size_t) file.gcount());
            if (content.size() == 8 && !ZipArchive::looksLikeZip(content) &&
                (headerLength(content) == 0 || headerLength(content) > MaxHeaderBytes))
                throw OpenMMException("GraphForce: the model file '" + path +
                                      "' is not a regular file, and its first 8 bytes begin neither a model file (a "
                                      "safetensors header length of 1 to " +
                                      std::to_string(MaxHeaderBytes) + " bytes; found " + std::to_string(headerLength(content)) +
                                      ") nor a zip archive (a TorchScript or AOTInductor model): stopped reading there");
        }
        std::stringstream rest;
        if (file)
            rest << file.rdbuf();
        content += rest.str();
    }
    catch (const std::bad_alloc&) {
        throw OpenMMException("GraphForce: out of memory while reading the model file '" + path + "' (" + std::to_string(content.size()) +
                              " bytes read before); is it a model file?");
    }
    if (file.bad())
        throw OpenMMException("GraphForce: error while reading the model file '" + path + "'");
    return content;
}

long long GraphModel::countParameters() const {
    long long count = radialTable.size() + interactionTable.size() + energyShift.size();
    for (const std::vector<DenseNetwork>* networks : {&fitting, &node})
        for (const DenseNetwork& network : *networks) {
            for (const DenseLayer& layer : network.hidden)
                count += layer.weight.size() + layer.bias.size() + layer.timestep.size();
            count += network.output.weight.size() + network.output.bias.size();
        }
    return count;
}
