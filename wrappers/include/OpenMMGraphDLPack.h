/*
 * openmm-graph: zero-copy DLPack views of an OpenMM Context's state.
 *
 * A stable C ABI (no C++ types) for any language: Python (ctypes), Julia
 * (ccall + DLPack.jl), C.  Every function returns 0 on success and a nonzero
 * OMMGraphStatus on failure; ommgraph_last_error() then gives a message (per
 * thread) that names the problem.
 *
 * Views (OMMGraphView) and their layout, per platform:
 *
 *  view                     CUDA platform (device memory, kDLCUDA)          Reference / CPU (host memory, kDLCPU)
 *  POSITIONS                posq: float32 or float64 [padded][4]: x, y, z   float64 [n][3], nm
 *                           in nm, w = charge (e); rows >= n are padding
 *  POSITION_CORRECTION      float32 [padded][4], mixed precision only       not available (error)
 *  VELOCITIES               velm: [padded][4], float32 in single precision, float64 [n][3], nm/ps
 *                           float64 in mixed and double: v in nm/ps,
 *                           w = 1/mass (1/amu), 0 for massless particles
 *  FORCES                   int64 [3][padded]: 64-bit fixed point,          float64 [n][3], kJ/mol/nm
 *                           2^32 units per kJ/mol/nm
 *  ATOM_ORDER               int32 [padded]: System index of the particle    int32 [n]: the identity (a copy)
 *                           in each sorted slot (read-only)
 *  BOX                      float64 [3][3]: rows a, b, c in nm (a copy, read-only) on every platform
 *
 * On the CUDA platform rows are in OpenMM's sorted order, which OpenMM changes
 * when it reorders atoms (ATOM_ORDER maps slots to System indices); the
 * pointers themselves stay valid until the Context is destroyed or
 * reinitialised.  In a periodic box OpenMM may also move a particle's stored
 * position by whole box vectors when it reorders (it keeps the image offsets
 * apart), so POSITIONS can differ from State.getPositions() by box vectors.
 * Tensors that own their data (copies, BOX, and ATOM_ORDER on host
 * platforms) carry DLPACK_FLAG_BITMASK_IS_COPIED; a failed call takes no
 * ownership of `owner`.  Apart from those, ommgraph_view_* copy nothing unless
 * OMMGRAPH_VIEW_COPY is given (then the tensor owns a copy, flagged IS_COPIED).
 * FORCES holds the forces of the Context's last evaluation of any kind (also
 * an energy-only getState), of the force groups it asked for; before the
 * Context's first evaluation it holds whatever OpenMM's buffer holds (on CUDA,
 * memory OpenMM has not written yet).  A write through
 * POSITIONS is not announced to OpenMM: an Integrator that keeps forces between
 * steps (CustomIntegrator, NoseHooverIntegrator) needs Context::setPositions
 * afterwards (Python: openmmgraph.dlpack.positions_changed).
 *
 * Lifetime: a view points into the Context's memory and is valid until the
 * Context is destroyed or reinitialised (Context.reinitialize(), which frees
 * that memory: ask ommgraph_context_live_views() first; the Python binding
 * refuses the reinitialize while such a tensor is alive); the deleter
 * (which the consumer calls exactly once) frees only the view's own
 * bookkeeping and copies, never OpenMM's memory.  Language bindings keep the
 * Context alive for as long as a view exists (Python: the capsule holds a
 * reference; Julia: unsafe_wrap's owner).
 */
#ifndef OPENMM_GRAPH_DLPACK_H_
#define OPENMM_GRAPH_DLPACK_H_

#include "GraphDLPackABI.h"

#if defined(_MSC_VER)
#define OMMGRAPH_C_EXPORT __declspec(dllexport)
#else
#define OMMGRAPH_C_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    OMMGRAPH_VIEW_POSITIONS = 0,
    OMMGRAPH_VIEW_POSITION_CORRECTION = 1,
    OMMGRAPH_VIEW_VELOCITIES = 2,
    OMMGRAPH_VIEW_FORCES = 3,
    OMMGRAPH_VIEW_ATOM_ORDER = 4,
    OMMGRAPH_VIEW_BOX = 5,
} OMMGraphView;

typedef enum {
    OMMGRAPH_OK = 0,
    OMMGRAPH_ERROR_ARGUMENT = 1,    /* a null pointer, an unknown view or flag */
    OMMGRAPH_ERROR_UNAVAILABLE = 2, /* the view does not exist on this platform or precision */
    OMMGRAPH_ERROR_PLATFORM = 3,    /* a platform other than Reference, CPU or CUDA */
    OMMGRAPH_ERROR_RUNTIME = 4,     /* OpenMM or CUDA reported an error (see the message) */
} OMMGraphStatus;

/* Flags of ommgraph_view_* (bitwise or). */
#define OMMGRAPH_VIEW_READ_ONLY 1u /* mark the tensor read-only (always set for ATOM_ORDER and BOX) */
#define OMMGRAPH_VIEW_COPY 2u      /* return an owned copy instead of a view */
#define OMMGRAPH_VIEW_HOST 4u      /* with COPY: the copy lives in host memory (kDLCPU) */

/** Called once by a view's deleter to release what keeps the Context alive (may be NULL). */
typedef void (*OMMGraphReleaseOwner)(void* owner);

/**
 * A versioned DLPack tensor (DLPack 1.1) of one view of an OpenMM Context.
 * context: an OpenMM::Context* (from C++: &context; from Python: int(context.this);
 * from OpenMM's C API: the OpenMM_Context*).  owner/releaseOwner: an object
 * that keeps the Context alive and the function the deleter calls to release
 * it (both may be NULL).  *out receives the tensor; the consumer calls
 * (*out)->deleter(*out) exactly once.
 */
OMMGRAPH_C_EXPORT int ommgraph_view_versioned(void* context, int view, unsigned flags, void* owner, OMMGraphReleaseOwner releaseOwner,
                                              DLManagedTensorVersioned** out);

/** The same view as a legacy DLManagedTensor (for consumers without DLPack 1.x, e.g. JAX, DLPack.jl). */
OMMGRAPH_C_EXPORT int ommgraph_view_legacy(void* context, int view, unsigned flags, void* owner, OMMGraphReleaseOwner releaseOwner,
                                           DLManagedTensor** out);

/*
 * Python helpers (resolved in the running interpreter at first use, so this
 * library does not link libpython):
 *  - ommgraph_python_release(owner): a releaseOwner that takes the GIL and
 *    decrements the reference count of the PyObject* owner;
 *  - ommgraph_capsule_destructor(capsule): a PyCapsule destructor for capsules
 *    named "dltensor" or "dltensor_versioned" that calls the tensor's deleter if
 *    no consumer took it (a consumed capsule is renamed "used_dltensor[...]").
 */
OMMGRAPH_C_EXPORT void ommgraph_python_release(void* owner);
OMMGRAPH_C_EXPORT void ommgraph_capsule_destructor(void* capsule);

/** The device of the Context's views: kDLCUDA and the CUDA device ordinal, or kDLCPU and 0. */
OMMGRAPH_C_EXPORT int ommgraph_view_device(void* context, int32_t* deviceType, int32_t* deviceId);

/**
 * The stream handshake of the Python array API: make `consumerStream` (a
 * CUstream / cudaStream_t; 0 is the legacy default stream, 2 the per-thread
 * one) wait for the work OpenMM has queued so far.  A no-op on host platforms.
 */
OMMGRAPH_C_EXPORT int ommgraph_synchronize_stream(void* context, uintptr_t consumerStream);

/**
 * Evaluate the forces of the force groups in `groups` (a bit mask, -1 for all)
 * at the Context's current positions, as Context::getState(State::Forces |
 * State::Energy, false, groups) does, without copying them out: the FORCES view
 * holds them afterwards.  *energy (may be NULL) receives their potential
 * energy in kJ/mol; it is left unchanged on failure.  An error of OpenMM (e.g.
 * a CallbackForce whose function failed) is returned as OMMGRAPH_ERROR_RUNTIME
 * with its message, where OpenMM's own C API lets the C++ exception escape,
 * which ends a C or Julia program.
 */
OMMGRAPH_C_EXPORT int ommgraph_compute_forces(void* context, int groups, double* energy);

/** The message of the last failed call on this thread ("" if none). */
OMMGRAPH_C_EXPORT const char* ommgraph_last_error(void);

/** The number of views whose deleter has not run yet (for tests of the deleter contract). */
OMMGRAPH_C_EXPORT int64_t ommgraph_live_views(void);

/**
 * *count receives the number of tensors of `view` (0 to 5, or -1 for every
 * view) of `context` (an OpenMM::Context*) whose deleter has not run yet and
 * whose memory Context::reinitialize() frees: zero-copy views, and on CUDA
 * also device copies (OMMGRAPH_VIEW_COPY without OMMGRAPH_VIEW_HOST), which
 * live in the CUDA context OpenMM creates for the Context and destroys on
 * reinitialize.  Host copies, BOX and the host ATOM_ORDER are not counted.
 * Call it before reinitialize(): while the count is nonzero, a reinitialize
 * leaves those tensors dangling.
 */
OMMGRAPH_C_EXPORT int ommgraph_context_live_views(void* context, int view, int64_t* count);

/**
 * The function of a callback force, called inside every force evaluation:
 * add forces in place into `forces` (NULL when only the energy is asked for),
 * store the energy (kJ/mol) in *energy, return 0 (nonzero makes the evaluation
 * throw).  The tensors are borrowed (valid during the call only) and have the
 * layouts of the table above; stream is OpenMM's CUDA stream (CUstream) on the
 * CUDA platform, 0 on host platforms.  See CallbackForce.h.
 */
typedef int (*OMMGraphForceCallback)(void* userData, const DLTensor* positions, DLTensor* forces, const DLTensor* box,
                                     const DLTensor* atomOrder, uintptr_t stream, double* energy);

/**
 * A new GraphPlugin::CallbackForce (an OpenMM::Force*, to add to a System,
 * which then owns it) that calls `function` with `userData`.
 */
OMMGRAPH_C_EXPORT int ommgraph_callback_force_create(OMMGraphForceCallback function, void* userData, void** force);

/**
 * Wrap a borrowed DLTensor (e.g. an argument of a callback) as a managed tensor
 * whose deleter frees only the wrapper: versioned (DLManagedTensorVersioned*,
 * with the READ_ONLY flag when flags has OMMGRAPH_VIEW_READ_ONLY) when
 * `versioned` is nonzero, else legacy (DLManagedTensor*).  The data stays the
 * lender's: valid only as long as the borrowed tensor is.
 */
OMMGRAPH_C_EXPORT int ommgraph_borrow_tensor(const DLTensor* tensor, int versioned, unsigned flags, void** out);

#ifdef __cplusplus
}
#endif

#endif /* OPENMM_GRAPH_DLPACK_H_ */
