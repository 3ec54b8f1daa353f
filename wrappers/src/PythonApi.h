#ifndef OPENMM_GRAPH_PYTHON_API_H_
#define OPENMM_GRAPH_PYTHON_API_H_

namespace GraphPlugin {

/**
 * The few functions of the running Python interpreter that the Python helpers
 * of OpenMMGraphDLPack.h need, found in the process (dlsym(RTLD_DEFAULT)) at
 * first use so that this library never links libpython.  PyObject* is void*.
 */
class PythonApi {
public:
    /** The interpreter's functions, or nullptr when any is missing (no Python in this process). Thread-safe. */
    static const PythonApi* find();

    int (*isInitialized)() = nullptr;                                      ///< Py_IsInitialized
    int (*gilStateEnsure)() = nullptr;                                     ///< PyGILState_Ensure (PyGILState_STATE is an int-sized enum)
    void (*gilStateRelease)(int) = nullptr;                                ///< PyGILState_Release
    void (*decRef)(void* object) = nullptr;                                ///< Py_DecRef
    int (*capsuleIsValid)(void* capsule, const char* name) = nullptr;      ///< PyCapsule_IsValid
    void* (*capsuleGetPointer)(void* capsule, const char* name) = nullptr; ///< PyCapsule_GetPointer
};

} // namespace GraphPlugin

#endif
