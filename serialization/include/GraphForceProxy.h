#ifndef OPENMM_GRAPH_FORCE_PROXY_H_
#define OPENMM_GRAPH_FORCE_PROXY_H_

#include "internal/windowsExportGraph.h"
#include "openmm/serialization/SerializationProxy.h"

namespace GraphPlugin {

/**
 * Serializes a GraphForce (XmlSerializer, and so System XML, pickling and
 * copying from Python).  A serialized GraphForce is self-contained: the model
 * file is embedded, base64-encoded, byte for byte.
 *
 * Version 1 layout of the "Force" node:
 *   attributes  version (1), forceGroup, name, usesPeriodic (bool),
 *               model (base64 of GraphForce::getModelBytes(), RFC 4648
 *               alphabet with '=' padding, no line breaks)
 *   Properties  one child "Property" per property that was set (key, value)
 *   Particles   one child "Particle" per particle, in order (particle, type)
 *
 * deserialize() rejects another version, and model text that is not valid
 * base64, with an OpenMMException saying what was found and expected; the
 * model itself is then validated by the model loader like any model file.
 */
class OPENMM_EXPORT_GRAPH GraphForceProxy : public OpenMM::SerializationProxy {
public:
    GraphForceProxy();
    void serialize(const void* object, OpenMM::SerializationNode& node) const override;
    void* deserialize(const OpenMM::SerializationNode& node) const override;
};

} // namespace GraphPlugin

#endif /*OPENMM_GRAPH_FORCE_PROXY_H_*/
