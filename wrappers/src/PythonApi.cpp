#include "PythonApi.h"
#include <dlfcn.h>

using namespace GraphPlugin;

namespace {

template <class Function> bool findSymbol(Function& function, const char* name) {
    function = reinterpret_cast<Function>(dlsym(RTLD_DEFAULT, name));
    return function != nullptr;
}

PythonApi* lookUp() {
    static PythonApi api;
    bool complete = findSymbol(api.isInitialized, "Py_IsInitialized");
    complete = findSymbol(api.gilStateEnsure, "PyGILState_Ensure") && complete;
    complete = findSymbol(api.gilStateRelease, "PyGILState_Release") && complete;
    complete = findSymbol(api.decRef, "Py_DecRef") && complete;
    complete = findSymbol(api.capsuleIsValid, "PyCapsule_IsValid") && complete;
    complete = findSymbol(api.capsuleGetPointer, "PyCapsule_GetPointer") && complete;
    return complete ? &api : nullptr;
}

} // namespace

const PythonApi* PythonApi::find() {
    static const PythonApi* const api = lookUp(); // initialised once, thread-safe
    return api;
}
