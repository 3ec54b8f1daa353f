#include "GraphForceProxy.h"
#include "GraphForce.h"
#include "internal/QuotedText.h"
#include "internal/Sha256.h"
#include "openmm/OpenMMException.h"
#include "openmm/serialization/SerializationNode.h"
#include <cstdint>
#include <memory>
#include <set>
#include <string>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

/**
 * Version 2 (session 63) adds `modelSha256`, the SHA-256 of the model's bytes, checked on reading. Version 1 (no
 * digest) is still read; a version above CurrentVersion is refused.
 */
const int CurrentVersion = 2;
const int OldestVersion = 1;

const char Base64Alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/** RFC 4648 base64 with '=' padding and no line breaks. */
std::string base64Encode(const std::string& bytes) {
    std::string text;
    text.reserve(4 * ((bytes.size() + 2) / 3));
    size_t i = 0;
    for (; i + 3 <= bytes.size(); i += 3) {
        uint32_t group = ((uint32_t) (unsigned char) bytes[i] << 16) | ((uint32_t) (unsigned char) bytes[i + 1] << 8) |
                         (uint32_t) (unsigned char) bytes[i + 2];
        text += Base64Alphabet[(group >> 18) & 63];
        text += Base64Alphabet[(group >> 12) & 63];
        text += Base64Alphabet[(group >> 6) & 63];
        text += Base64Alphabet[group & 63];
    }
    size_t remaining = bytes.size() - i;
    if (remaining > 0) {
        uint32_t group = (uint32_t) (unsigned char) bytes[i] << 16;
        if (remaining == 2)
            group |= (uint32_t) (unsigned char) bytes[i + 1] << 8;
        text += Base64Alphabet[(group >> 18) & 63];
        text += Base64Alphabet[(group >> 12) & 63];
        text += remaining == 2 ? Base64Alphabet[(group >> 6) & 63] : '=';
        text += '=';
    }
    return text;
}

/** The 6-bit value of a base64 character, or -1 if it is not one. */
int base64Value(char c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

std::string describeCharacter(char c) {
    unsigned char code = (unsigned char) c;
    if (code >= 32 && code < 127)
        return "'" + std::string(1, c) + "'";
    return "byte " + std::to_string((int) code);
}

/** Strict RFC 4648 decoding: only the alphabet, '=' padding at the very end, length a multiple of 4. */
std::string base64Decode(const std::string& text) {
    const std::string where = "GraphForceProxy: the model's base64 text (attribute 'model')";
    if (text.size() % 4 != 0)
        throw OpenMMException(where + " has " + std::to_string(text.size()) + " characters, expected a multiple of 4 (is it truncated?)");
    size_t padding = 0;
    if (!text.empty() && text[text.size() - 1] == '=')
        padding = (text.size() >= 2 && text[text.size() - 2] == '=') ? 2 : 1;
    std::string bytes;
    bytes.reserve(3 * (text.size() / 4));
    for (size_t i = 0; i < text.size(); i += 4) {
        uint32_t group = 0;
        for (size_t j = 0; j < 4; j++) {
            size_t position = i + j;
            char c = text[position];
            int value = base64Value(c);
            if (value < 0) {
                if (c == '=' && position >= text.size() - padding)
                    value = 0;
                else
                    throw OpenMMException(where + " has an invalid character " + describeCharacter(c) + " at position " +
                                          std::to_string(position) + "; expected A-Z, a-z, 0-9, '+', '/', or '=' padding at the end");
            }
            group = (group << 6) | (uint32_t) value;
        }
        bytes += (char) ((group >> 16) & 0xFF);
        bytes += (char) ((group >> 8) & 0xFF);
        bytes += (char) (group & 0xFF);
    }
    bytes.resize(bytes.size() - padding);
    return bytes;
}

/**
 * One element of the XML as the proxy reads it: every attribute is required
 * and parsed strictly, attributes it does not know are refused (as are
 * children, for an element that openmm-graph writes without any), and errors
 * name the element and the attribute.
 */
class StrictElement {
public:
    StrictElement(const SerializationNode& node, int version, const std::string& where, const std::set<std::string>& known,
                  bool leaf = false)
        : node(node), where(where) {
        for (const auto& property : node.getProperties())
            if (known.count(property.first) == 0)
                throw OpenMMException("GraphForceProxy: " + where + " has an unknown attribute " + quotedText(property.first) +
                                      " (serialization version " + std::to_string(version) + " has " +
                                      (known.empty() ? std::string("none") : "only " + listOf(known)) + ")");
        if (leaf && !node.getChildren().empty())
            throw OpenMMException("GraphForceProxy: " + where + " has a child <" + node.getChildren()[0].getName() +
                                  ">; it has none in serialization version " + std::to_string(version));
    }

    std::string text(const std::string& name) const {
        if (!node.hasProperty(name))
            throw OpenMMException("GraphForceProxy: " + where + " has no attribute '" + name +
                                  "' (openmm-graph always writes it: was the XML edited?)");
        return node.getStringProperty(name);
    }

    /** A whole decimal number (an optional '-' and digits, nothing else) in [least, most]. */
    int integer(const std::string& name, long long least, long long most) const {
        const std::string value = text(name);
        size_t start = !value.empty() && value[0] == '-' ? 1 : 0;
        bool digits = value.size() > start && value.size() - start <= 10;
        for (size_t i = start; digits && i < value.size(); i++)
            digits = value[i] >= '0' && value[i] <= '9';
        long long number = digits ? std::stoll(value) : 0;
        if (!digits || number < least || number > most)
            throw OpenMMException("GraphForceProxy: " + where + ": attribute '" + name + "' is " + quotedText(value) +
                                  "; expected a whole number from " + std::to_string(least) + " to " + std::to_string(most));
        return (int) number;
    }

    /** "1" or "0", as SerializationNode::setBoolProperty writes them. */
    bool boolean(const std::string& name) const {
        const std::string value = text(name);
        if (value != "0" && value != "1")
            throw OpenMMException("GraphForceProxy: " + where + ": attribute '" + name + "' is " + quotedText(value) + "; expected 1 or 0");
        return value == "1";
    }

    static std::string listOf(const std::set<std::string>& names) {
        std::string list;
        for (const std::string& name : names)
            list += (list.empty() ? "" : ", ") + name;
        return list;
    }

private:
    const SerializationNode& node;
    std::string where;
};

/** The only child of `node` named `name` (the GraphForce element has exactly <Properties> and <Particles>). */
const SerializationNode& onlyChild(const SerializationNode& node, const std::string& name) {
    const SerializationNode* found = nullptr;
    for (const SerializationNode& child : node.getChildren()) {
        if (child.getName() != "Properties" && child.getName() != "Particles")
            throw OpenMMException("GraphForceProxy: the GraphForce element has an unknown child <" + child.getName() +
                                  ">; expected <Properties> and <Particles>");
        if (child.getName() != name)
            continue;
        if (found != nullptr)
            throw OpenMMException("GraphForceProxy: the GraphForce element has two <" + name + "> children");
        found = &child;
    }
    if (found == nullptr)
        throw OpenMMException("GraphForceProxy: the GraphForce element has no <" + name +
                              "> child (openmm-graph always writes it: was the XML edited?)");
    return *found;
}

} // namespace

GraphForceProxy::GraphForceProxy() : SerializationProxy("GraphForce") {}

void GraphForceProxy::serialize(const void* object, SerializationNode& node) const {
    const GraphForce& force = *reinterpret_cast<const GraphForce*>(object);
    if (force.getName().find('\0') != std::string::npos)
        throw OpenMMException("GraphForceProxy: the force's name " + quotedText(force.getName()) +
                              " contains a NUL character, which XML cannot hold; rename the force (setName) before serializing it");
    node.setIntProperty("version", CurrentVersion);
    node.setIntProperty("forceGroup", force.getForceGroup());
    node.setStringProperty("name", force.getName());
    node.setBoolProperty("usesPeriodic", force.usesPeriodicBoundaryConditions());
    node.setStringProperty("model", base64Encode(force.getModelBytes()));
    node.setStringProperty("modelSha256", sha256Hex(force.getModelBytes()));
    SerializationNode& properties = node.createChildNode("Properties");
    for (const auto& property : force.getProperties())
        properties.createChildNode("Property").setStringProperty("key", property.first).setStringProperty("value", property.second);
    SerializationNode& particles = node.createChildNode("Particles");
    for (int i = 0; i < force.getNumParticles(); i++) {
        int particle, type;
        force.getParticleParameters(i, particle, type);
        particles.createChildNode("Particle").setIntProperty("particle", particle).setIntProperty("type", type);
    }
}

void* GraphForceProxy::deserialize(const SerializationNode& node) const {
    if (!node.hasProperty("version"))
        throw OpenMMException(
            "GraphForceProxy: the GraphForce element has no attribute 'version'; this build of openmm-graph reads versions " +
            std::to_string(OldestVersion) + " to " + std::to_string(CurrentVersion));
    const std::string versionText = node.getStringProperty("version");
    int version = 0;
    for (int known = OldestVersion; known <= CurrentVersion; known++)
        if (versionText == std::to_string(known))
            version = known;
    if (version == 0)
        throw OpenMMException(
            "GraphForceProxy: unsupported GraphForce serialization version " +
            (versionText.find_first_not_of("0123456789") == std::string::npos && !versionText.empty() ? versionText
                                                                                                      : quotedText(versionText)) +
            "; this build of openmm-graph reads versions " + std::to_string(OldestVersion) + " to " + std::to_string(CurrentVersion));
    const bool hasDigest = version >= 2;
    // "type" is the attribute XmlSerializer itself adds to the root element.
    std::set<std::string> known = {"version", "forceGroup", "name", "usesPeriodic", "model", "type"};
    if (hasDigest)
        known.insert("modelSha256");
    const StrictElement root(node, version, "the GraphForce element", known);
    const int forceGroup = root.integer("forceGroup", 0, 31);
    const std::string name = root.text("name");
    const bool periodic = root.boolean("usesPeriodic");
    const std::string modelBytes = base64Decode(root.text("model"));
    if (hasDigest) {
        const std::string recorded = root.text("modelSha256");
        const std::string computed = sha256Hex(modelBytes);
        if (recorded.size() != 64 || recorded.find_first_not_of("0123456789abcdef") != std::string::npos)
            throw OpenMMException("GraphForceProxy: the GraphForce element: attribute 'modelSha256' is " +
                                  quotedText(fileErrorText(recorded, 100)) +
                                  "; expected the model's SHA-256 as 64 lowercase hexadecimal digits");
        if (recorded != computed)
            throw OpenMMException("GraphForceProxy: the embedded model's bytes (" + std::to_string(modelBytes.size()) +
                                  " bytes) do not match the SHA-256 recorded beside them (modelSha256 " + recorded + ", the bytes give " +
                                  computed +
                                  "): the XML was damaged or edited after it was written; serialize the System again "
                                  "from its source");
    }
    std::unique_ptr<GraphForce> force(GraphForce::fromModelBytes(modelBytes));
    force->setForceGroup(forceGroup);
    force->setName(name);
    force->setUsesPeriodicBoundaryConditions(periodic);
    std::set<std::string> keys;
    const SerializationNode& properties = onlyChild(node, "Properties");
    const StrictElement propertiesElement(properties, version, "the <Properties> element", {});
    for (const SerializationNode& property : properties.getChildren()) {
        if (property.getName() != "Property")
            throw OpenMMException("GraphForceProxy: <Properties> has a child <" + property.getName() +
                                  ">; expected <Property key= value=>");
        const StrictElement element(property, version, "a <Property> element", {"key", "value"}, true);
        const std::string key = element.text("key");
        if (!keys.insert(key).second)
            throw OpenMMException("GraphForceProxy: the property " + quotedText(key) + " is given twice");
        force->setProperty(key, element.text("value"));
    }
    const SerializationNode& particles = onlyChild(node, "Particles");
    const StrictElement particlesElement(particles, version, "the <Particles> element", {});
    for (size_t i = 0; i < particles.getChildren().size(); i++) {
        const SerializationNode& particle = particles.getChildren()[i];
        const std::string where = "<Particle> element " + std::to_string(i) + " (from 0)";
        if (particle.getName() != "Particle")
            throw OpenMMException("GraphForceProxy: <Particles> has a child <" + particle.getName() +
                                  ">; expected <Particle particle= type=>");
        const StrictElement element(particle, version, where, {"particle", "type"}, true);
        force->addParticle(element.integer("particle", 0, 2147483647LL), element.integer("type", 0, force->getNumTypes() - 1));
    }
    return force.release();
}
