#include "GraphForce.h"
#include "GraphForceProxy.h"
#include "openmm/serialization/SerializationProxy.h"
#include <mutex>

using namespace GraphPlugin;
using namespace OpenMM;

/**
 * Register the serialization proxies of openmm-graph with OpenMM.  Runs by
 * itself when libOpenMMGraph is loaded; calling it again does nothing.
 */
extern "C" OPENMM_EXPORT_GRAPH void registerGraphSerializationProxies() {
    static std::once_flag registered;
    std::call_once(registered, [] { SerializationProxy::registerProxy(typeid(GraphForce), new GraphForceProxy()); });
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((constructor)) static void registerGraphSerializationProxiesOnLoad() {
    registerGraphSerializationProxies();
}
#else
namespace {
struct GraphSerializationRegistrar {
    GraphSerializationRegistrar() {
        registerGraphSerializationProxies();
    }
} graphSerializationRegistrar;
} // namespace
#endif
