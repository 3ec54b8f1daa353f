#ifndef OPENMM_GRAPH_CALLBACK_FORCE_H_
#define OPENMM_GRAPH_CALLBACK_FORCE_H_

#include "openmm/Force.h"
#include <cstdint>

#ifndef OPENMM_EXPORT_GRAPH_DLPACK
#if defined(_MSC_VER)
#define OPENMM_EXPORT_GRAPH_DLPACK __declspec(dllexport)
#else
#define OPENMM_EXPORT_GRAPH_DLPACK __attribute__((visibility("default")))
#endif
#endif

namespace GraphPlugin {

/**
 * A Force whose energy and forces come from a user function, called inside
 * every force evaluation of the Context with zero-copy DLPack views of the
 * positions, the force buffer, the box and the atom order (the layouts of
 * OpenMMGraphDLPack.h for the Context's platform).  The function adds its
 * forces in place into the force buffer (on the CUDA platform OpenMM's 64-bit
 * fixed-point buffer, 2^32 units per kJ/mol/nm, so the result does not depend
 * on the order of additions) and returns its energy in kJ/mol, which OpenMM
 * adds to the potential energy.  Typical use: bias forces of enhanced sampling.
 *
 * The function (type Function, the C type OMMGraphForceCallback):
 *
 *     int function(void* userData, const DLTensor* positions, DLTensor* forces, const DLTensor* box,
 *                  const DLTensor* atomOrder, uintptr_t stream, double* energy)
 *
 * - the tensors are borrowed: valid during the call only (they point into the
 *   Context's memory); forces is NULL when OpenMM asks for the energy alone;
 * - stream is OpenMM's CUDA stream (a CUstream) on the CUDA platform, 0 on
 *   host platforms: device work must be queued on it (or synchronised with it);
 * - return 0 on success; anything else makes the evaluation throw an
 *   OpenMMException;
 * - it must not evaluate its own Context (getState with energy or forces, a
 *   step): the nested evaluation throws an OpenMMException, as it would
 *   refill the force buffer the outer one is filling.
 *
 * A CallbackForce holds a function pointer, so it cannot be serialized.
 */
class OPENMM_EXPORT_GRAPH_DLPACK CallbackForce : public OpenMM::Force {
public:
    /** The function type (DLTensor* written as void* to keep DLPack out of this header). */
    typedef int (*Function)(void* userData, const void* positions, void* forces, const void* box, const void* atomOrder,
                            uintptr_t stream, double* energy);
    CallbackForce();
    /**
     * Set the function and the pointer passed to it as userData.  The Context
     * calls whatever is set at each evaluation; a function cleared (NULL)
     * after Context creation makes the next evaluation throw.
     */
    void setFunction(Function function, void* userData);
    /** The same as integers (for bindings such as Python's ctypes and Julia's @cfunction). */
    void setFunctionAddress(unsigned long long function, unsigned long long userData);
    Function getFunction() const {
        return function;
    }
    void* getUserData() const {
        return userData;
    }
    /** Whether the function uses periodic boundary conditions (default false); OpenMM uses this to check the box. */
    void setUsesPeriodicBoundaryConditions(bool periodic);
    bool usesPeriodicBoundaryConditions() const override;

protected:
    OpenMM::ForceImpl* createImpl() const override;

private:
    Function function;
    void* userData;
    bool periodic;
};

} // namespace GraphPlugin

#endif
