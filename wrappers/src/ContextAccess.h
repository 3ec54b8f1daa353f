#ifndef OPENMM_GRAPH_CONTEXT_ACCESS_H_
#define OPENMM_GRAPH_CONTEXT_ACCESS_H_

#include "openmm/Context.h"
#include "openmm/Force.h"
#include "openmm/internal/ContextImpl.h"

namespace GraphPlugin {

/**
 * Reaches the ContextImpl behind a public OpenMM::Context.  OpenMM offers this
 * only to Forces (Force::getContextImpl is protected), so this is a Force that
 * is never added to a System: it exists for that one call.
 */
class ContextAccess : public OpenMM::Force {
public:
    /** The ContextImpl of `context` (owned by the Context; valid until it is destroyed or reinitialised). */
    static OpenMM::ContextImpl& implOf(OpenMM::Context& context);

protected:
    OpenMM::ForceImpl* createImpl() const override;
};

} // namespace GraphPlugin

#endif
