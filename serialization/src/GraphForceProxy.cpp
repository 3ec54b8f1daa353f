#include "GraphForceProxy.h"
#include "GraphForce.h"
#include "openmm/OpenMMException.h"
#include "openmm/serialization/SerializationNode.h"
#include <cstdint>
#include <memory>
#include <string>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

const int CurrentVersion = 1;

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

} // namespace

GraphForceProxy::GraphForceProxy() : SerializationProxy("GraphForce") {}

void GraphForceProxy::serialize(const void* object, SerializationNode& node) const {
    const GraphForce& force = *reinterpret_cast<const GraphForce*>(object);
    node.setIntProperty("version", CurrentVersion);
    node.setIntProperty("forceGroup", force.getForceGroup());
    node.setStringProperty("name", force.getName());
    node.setBoolProperty("usesPeriodic", force.usesPeriodicBoundaryConditions());
    node.setStringProperty("model", base64Encode(force.getModelBytes()));
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
    int version = node.getIntProperty("version");
    if (version != CurrentVersion)
        throw OpenMMException("GraphForceProxy: unsupported GraphForce serialization version " + std::to_string(version) +
                              "; this build of openmm-graph reads version " + std::to_string(CurrentVersion));
    std::unique_ptr<GraphForce> force(GraphForce::fromModelBytes(base64Decode(node.getStringProperty("model"))));
    force->setForceGroup(node.getIntProperty("forceGroup", 0));
    force->setName(node.getStringProperty("name", force->getName()));
    force->setUsesPeriodicBoundaryConditions(node.getBoolProperty("usesPeriodic", false));
    for (const SerializationNode& property : node.getChildNode("Properties").getChildren())
        force->setProperty(property.getStringProperty("key"), property.getStringProperty("value"));
    for (const SerializationNode& particle : node.getChildNode("Particles").getChildren())
        force->addParticle(particle.getIntProperty("particle"), particle.getIntProperty("type"));
    return force.release();
}
