/**
 * GraphModelLoader for TorchScript archives (docs/torch-models.md): reads and
 * checks the openmmgraph.json metadata the archive carries; the module itself
 * is loaded by the LibTorch plugin from the force's model bytes.
 */
#include "JsonValue.h"
#include "ZipArchive.h"
#include "internal/GraphModelLoader.h"
#include "openmm/OpenMMException.h"
#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

using namespace GraphPlugin;
using OpenMM::OpenMMException;

namespace {

[[noreturn]] void fail(const std::string& message) {
    throw OpenMMException("GraphForce: TorchScript model: " + message);
}

const JsonValue& member(const JsonValue& object, const std::string& key, JsonValue::Kind kind) {
    auto it = object.object.find(key);
    if (it == object.object.end())
        fail("openmmgraph.json has no key '" + key + "'");
    if (it->second.kind != kind)
        fail("openmmgraph.json key '" + key + "': expected " + JsonValue::kindName(kind) + ", found " +
             JsonValue::kindName(it->second.kind));
    return it->second;
}

const std::string& text(const JsonValue& object, const std::string& key) {
    return member(object, key, JsonValue::Kind::String).string;
}

double number(const JsonValue& object, const std::string& key) {
    return member(object, key, JsonValue::Kind::Number).number;
}

/** A whole number in [low, high] (checked before any conversion to int); `what` names it in the message. */
int wholeNumber(const JsonValue& object, const std::string& key, int low, int high, const std::string& what) {
    const JsonValue& value = member(object, key, JsonValue::Kind::Number);
    if (!(value.number >= low && value.number <= high && value.number == std::floor(value.number)))
        fail(what + ": expected an integer in [" + std::to_string(low) + ", " + std::to_string(high) + "], found " + value.numberText);
    return (int) value.number;
}

/** Whether `text` ends with `suffix`. */
bool endsWith(const std::string& text, const std::string& suffix) {
    return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/**
 * An AOTInductor package must hold what LibTorch's AOTIModelPackageLoader reads for the model "model", checked here
 * because the loader does not check it itself (LibTorch 2.11): the names of the first two entries are read without a
 * check of the count (a package of one entry reads past the list), a package without a compiled program (.so) is
 * compiled at load time by commands its own files give, and the metadata is read from "<the last .cpp>_metadata.json"
 * (a relative "_metadata.json" in the working directory when there is no .cpp).  `names`: the central directory's.
 */
void checkPackageLayout(const std::vector<std::string>& names) {
    const std::string advice = " (openmmgraph.torch_export.export_aoti writes one; docs/torch-models.md)";
    if (names.size() < 2)
        fail("AOTInductor package: it has " + std::string(names.empty() ? "no entry" : "one entry") +
             ", not the compiled program and the files beside it that torch._inductor packages hold" + advice);
    // LibTorch's prefix: the top folder of the first two entries when they share one.
    const std::string prefix0 = names[0].substr(0, names[0].find('/')), prefix1 = names[1].substr(0, names[1].find('/'));
    const std::string prefix = !prefix0.empty() && prefix0 == prefix1 ? prefix0 + "/" : std::string();
    const std::string directory = prefix + "data/aotinductor/model/";
    bool program = false;
    std::string lastSource;
    for (const std::string& name : names)
        if (name.compare(0, directory.size(), directory) == 0) {
            program = program || endsWith(name, ".so");
            if (endsWith(name, ".cpp"))
                lastSource = name;
        }
    if (!program)
        fail("AOTInductor package: it has no compiled program (no " + directory +
             "*.so); LibTorch would compile the package's C++ when it loads it, which openmm-graph does not let it do" + advice);
    const std::string metadata = lastSource.empty() ? std::string() : lastSource.substr(0, lastSource.size() - 4) + "_metadata.json";
    if (metadata.empty() || std::find(names.begin(), names.end(), metadata) == names.end())
        fail("AOTInductor package: it has no " + (metadata.empty() ? directory + "*.cpp with its _metadata.json" : "'" + metadata + "'") +
             ", where LibTorch reads the program's metadata" + advice);
}

} // namespace

std::shared_ptr<const GraphModel> GraphModelLoader::fromTorchScriptBytes(const std::string& bytes) {
    std::string json;
    try {
        // Every entry's CRC-32, before LibTorch reads any of them (it does not check them): a damaged archive is an error.
        ZipArchive::checkEntries(bytes);
        if (!ZipArchive::readEntry(bytes, "/extra/openmmgraph.json", json))
            fail("the archive has no extra file openmmgraph.json: it is not a model exported for openmm-graph "
                 "(see docs/torch-models.md; openmmgraph.torch_export.export_torchscript writes one)");
    }
    catch (const std::runtime_error& error) {
        fail(error.what());
    }
    const JsonValue meta = JsonValue::parse(json.data(), json.size(), "openmmgraph.json");
    if (meta.kind != JsonValue::Kind::Object)
        fail("openmmgraph.json: expected a JSON object");
    static const std::set<std::string> known = {
        "format",    "version", "interface", "length_unit",      "energy_unit",    "length_scale_nm", "energy_scale_kj_per_mol",
        "cutoff",    "types",   "dtype",     "uses_communicate", "n_interactions", "program",         "device",
        "capturable"};
    for (const std::string& key : meta.keyOrder)
        if (!known.count(key))
            fail("openmmgraph.json has an unknown key '" + key + "'");
    if (text(meta, "format") != "openmm-graph-torch")
        fail("openmmgraph.json key 'format': expected \"openmm-graph-torch\", found \"" + text(meta, "format") + "\"");
    if (member(meta, "version", JsonValue::Kind::Number).numberText != "1")
        fail("openmmgraph.json key 'version': this version reads version 1, found " +
             member(meta, "version", JsonValue::Kind::Number).numberText);
    // "particle_energies": a TorchScript module (forces by autograd); "particle_energies_and_gradients": a program
    // that returns the gradients too (an AOTInductor package always; a TorchScript module that differentiates itself).
    const std::string& interface = text(meta, "interface");
    if (interface != "particle_energies" && interface != "particle_energies_and_gradients")
        fail("openmmgraph.json key 'interface': expected \"particle_energies\" (TorchScript) or \"particle_energies_and_gradients\" "
             "(AOTInductor), found \"" +
             interface + "\"");
    const std::string program = meta.object.count("program") ? text(meta, "program") : std::string("torchscript");
    if ((program == "aotinductor" && interface != "particle_energies_and_gradients") ||
        (program != "torchscript" && program != "aotinductor"))
        fail("openmmgraph.json key 'program': expected \"torchscript\" (with either interface) or \"aotinductor\" with "
             "\"particle_energies_and_gradients\", found \"" +
             program + "\" with \"" + interface + "\"");
    const std::string device = meta.object.count("device") ? text(meta, "device") : std::string("cpu");
    if (device != "cpu" && device != "cuda")
        fail("openmmgraph.json key 'device': expected \"cpu\" or \"cuda\" (what an AOTInductor package was compiled for; a "
             "TorchScript module runs on either), found \"" +
             device + "\"");
    if (program == "aotinductor")
        checkPackageLayout(ZipArchive::entryNames(bytes)); // the archive's entries were checked above
    auto model = std::make_shared<GraphModel>();
    model->kind = program == "aotinductor" ? ModelKind::AOTInductor : ModelKind::TorchScript;
    model->torchPackageForCuda = program == "aotinductor" && device == "cuda";
    model->torchReturnsGradients = interface == "particle_energies_and_gradients";
    model->lengthUnit = text(meta, "length_unit");
    model->energyUnit = text(meta, "energy_unit");
    if (!unitScale(model->lengthUnit, true, model->lengthScale))
        fail("openmmgraph.json key 'length_unit': expected nm, angstrom or bohr, found \"" + model->lengthUnit + "\"");
    if (!unitScale(model->energyUnit, false, model->energyScale))
        fail("openmmgraph.json key 'energy_unit': expected kJ/mol, kcal/mol, eV or hartree, found \"" + model->energyUnit + "\"");
    for (const char* key : {"length_scale_nm", "energy_scale_kj_per_mol"})
        if (meta.object.count(key)) {
            const double expected = std::string(key) == "length_scale_nm" ? model->lengthScale : model->energyScale;
            if (!(std::fabs(number(meta, key) - expected) <= 1e-9 * expected))
                fail(std::string("openmmgraph.json key '") + key + "' (" + std::to_string(number(meta, key)) +
                     ") disagrees with the unit (" + std::to_string(expected) + ")");
        }
    const double cutoff = number(meta, "cutoff");
    if (!(cutoff > 0) || !std::isfinite(cutoff))
        fail("openmmgraph.json key 'cutoff': expected a positive number (model length unit), found " + std::to_string(cutoff));
    model->cutoff = cutoff * model->lengthScale;
    const JsonValue& types = member(meta, "types", JsonValue::Kind::Array);
    if (types.array.empty() || types.array.size() > 256)
        fail("openmmgraph.json key 'types': expected 1 to 256 types, found " + std::to_string(types.array.size()));
    std::set<std::string> seen;
    for (const JsonValue& type : types.array) {
        if (type.kind != JsonValue::Kind::Object)
            fail("openmmgraph.json key 'types': each entry must be an object {\"name\", \"atomic_number\"}");
        const std::string& name = text(type, "name");
        if (name.empty())
            fail("openmmgraph.json key 'types': expected non-empty names, found \"\"");
        if (!seen.insert(name).second)
            fail("openmmgraph.json key 'types': expected unique names, found \"" + name + "\" twice");
        const int z = wholeNumber(type, "atomic_number", 0, 118, "openmmgraph.json key 'types': type \"" + name + "\" atomic_number");
        model->typeNames.push_back(name);
        model->typeAtomicNumbers.push_back(z);
    }
    model->numTypes = (int) model->typeNames.size();
    const std::string& dtype = text(meta, "dtype");
    if (dtype != "float64" && dtype != "float32")
        fail("openmmgraph.json key 'dtype': expected \"float64\" or \"float32\", found \"" + dtype + "\"");
    model->torchFloat32 = dtype == "float32";
    model->fileIsFloat32 = model->torchFloat32;
    if (meta.object.count("uses_communicate"))
        model->torchUsesCommunicate = member(meta, "uses_communicate", JsonValue::Kind::Bool).boolean;
    if (meta.object.count("capturable"))
        model->torchCapturable = member(meta, "capturable", JsonValue::Kind::Bool).boolean;
    if (meta.object.count("n_interactions"))
        model->numInteractions = wholeNumber(meta, "n_interactions", 0, 1, "openmmgraph.json key 'n_interactions'");
    return model;
}
