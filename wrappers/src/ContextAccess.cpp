#include "ContextAccess.h"

using namespace GraphPlugin;
using namespace OpenMM;

ContextImpl& ContextAccess::implOf(Context& context) {
    const ContextAccess access;
    return access.getContextImpl(context);
}

ForceImpl* ContextAccess::createImpl() const {
    return nullptr; // never added to a System
}
