/*
 * The C entry points of OpenMMGraphDLPack.h.  Each one runs its body through
 * guarded(): the one error path, which turns a DLPackError (or an OpenMM or
 * allocation failure) into the returned status and the thread's last-error
 * message, and clears the message on success.
 */
#include "OpenMMGraphDLPack.h"
#include "CallbackForce.h"
#include "ContextAccess.h"
#include "DLPackError.h"
#include "ManagedView.h"
#include "PythonApi.h"
#include "StateViewProvider.h"
#include "openmm/OpenMMException.h"
#include <new>
#include <sstream>

using namespace GraphPlugin;
using namespace OpenMM;

namespace {

template <class Body> int guarded(const std::string& subject, Body body) noexcept {
    try {
        try {
            body();
            clearLastError();
            return OMMGRAPH_OK;
        }
        catch (const DLPackError& error) {
            setLastError(subject, error.what());
            return error.status();
        }
        catch (const OpenMMException& error) {
            setLastError(subject, std::string("OpenMM reported an error: ") + error.what());
        }
        catch (const std::bad_alloc&) {
            setLastError(subject, "out of host memory");
        }
        catch (const std::exception& error) {
            setLastError(subject, error.what());
        }
    }
    catch (...) {
        // Even the message could not be stored; the status still says what happened.
    }
    return OMMGRAPH_ERROR_RUNTIME;
}

ContextImpl& contextImpl(void* context) {
    if (context == nullptr)
        throw DLPackError(OMMGRAPH_ERROR_ARGUMENT, "the context is NULL (pass an OpenMM::Context*)");
    return ContextAccess::implOf(*static_cast<Context*>(context));
}

void checkFlags(unsigned flags) {
    const unsigned known = OMMGRAPH_VIEW_READ_ONLY | OMMGRAPH_VIEW_COPY | OMMGRAPH_VIEW_HOST;
    if ((flags & ~known) != 0) {
        std::stringstream message;
        message << "unknown flags 0x" << std::hex << (flags & ~known)
                << "; the flags are OMMGRAPH_VIEW_READ_ONLY (1), OMMGRAPH_VIEW_COPY (2) and OMMGRAPH_VIEW_HOST (4)";
        throw DLPackError(OMMGRAPH_ERROR_ARGUMENT, message.str());
    }
    if ((flags & OMMGRAPH_VIEW_HOST) != 0 && (flags & OMMGRAPH_VIEW_COPY) == 0)
        throw DLPackError(OMMGRAPH_ERROR_ARGUMENT,
                          "OMMGRAPH_VIEW_HOST needs OMMGRAPH_VIEW_COPY (only a copy can live elsewhere than OpenMM's arrays)");
}

/**
 * The view (or copy) that a tensor will describe, and its DLPack flags:
 * READ_ONLY when asked or when writes would not reach the Context, IS_COPIED
 * when the tensor owns its data (a copy, the box, the host ATOM_ORDER).
 */
StateView makeStateView(void* context, int view, unsigned flags, uint64_t& dlpackFlags) {
    if (viewName(view)[0] == '\0')
        throw DLPackError(OMMGRAPH_ERROR_ARGUMENT, "unknown view number " + std::to_string(view) +
                                                       " (the views are 0 POSITIONS, 1 POSITION_CORRECTION, 2 VELOCITIES, 3 "
                                                       "FORCES, 4 ATOM_ORDER, 5 BOX)");
    checkFlags(flags);
    std::unique_ptr<StateViewProvider> provider = StateViewProvider::forContext(contextImpl(context));
    StateView state = provider->describe(view);
    if ((flags & OMMGRAPH_VIEW_COPY) != 0 && state.owned.data() == nullptr)
        state = provider->copy(state, (flags & OMMGRAPH_VIEW_HOST) != 0);
    dlpackFlags = 0;
    if (state.readOnly || (flags & OMMGRAPH_VIEW_READ_ONLY) != 0)
        dlpackFlags |= DLPACK_FLAG_BITMASK_READ_ONLY;
    if (state.owned.data() != nullptr)
        dlpackFlags |= DLPACK_FLAG_BITMASK_IS_COPIED;
    return state;
}

} // namespace

extern "C" {

OMMGRAPH_C_EXPORT int ommgraph_view_versioned(void* context, int view, unsigned flags, void* owner, OMMGraphReleaseOwner releaseOwner,
                                              DLManagedTensorVersioned** out) {
    return guarded(viewSubject(view), [&] {
        if (out == nullptr)
            throw DLPackError(OMMGRAPH_ERROR_ARGUMENT, "out is NULL (pass the address of a DLManagedTensorVersioned*)");
        *out = nullptr;
        uint64_t dlpackFlags = 0;
        StateView state = makeStateView(context, view, flags, dlpackFlags);
        *out = ManagedView::createVersioned(std::move(state), {context, view}, dlpackFlags, owner, releaseOwner);
    });
}

OMMGRAPH_C_EXPORT int ommgraph_view_legacy(void* context, int view, unsigned flags, void* owner, OMMGraphReleaseOwner releaseOwner,
                                           DLManagedTensor** out) {
    return guarded(viewSubject(view), [&] {
        if (out == nullptr)
            throw DLPackError(OMMGRAPH_ERROR_ARGUMENT, "out is NULL (pass the address of a DLManagedTensor*)");
        *out = nullptr;
        uint64_t dlpackFlags = 0;
        StateView state = makeStateView(context, view, flags, dlpackFlags);
        *out = ManagedView::createLegacy(std::move(state), {context, view}, owner, releaseOwner);
    });
}

OMMGRAPH_C_EXPORT int ommgraph_view_device(void* context, int32_t* deviceType, int32_t* deviceId) {
    return guarded("ommgraph_view_device", [&] {
        if (deviceType == nullptr || deviceId == nullptr)
            throw DLPackError(OMMGRAPH_ERROR_ARGUMENT, "deviceType and deviceId must not be NULL");
        DLDevice device = StateViewProvider::forContext(contextImpl(context))->device();
        *deviceType = device.device_type;
        *deviceId = device.device_id;
    });
}

OMMGRAPH_C_EXPORT int ommgraph_synchronize_stream(void* context, uintptr_t consumerStream) {
    return guarded("ommgraph_synchronize_stream",
                   [&] { StateViewProvider::forContext(contextImpl(context))->synchronize(consumerStream); });
}

OMMGRAPH_C_EXPORT int ommgraph_compute_forces(void* context, int groups, double* energy) {
    return guarded("ommgraph_compute_forces", [&] {
        // What Context::getState(State::Forces | State::Energy) runs, without the State's host copy of the forces.
        double value = contextImpl(context).calcForcesAndEnergy(true, energy != nullptr, groups);
        if (energy != nullptr)
            *energy = value;
    });
}

OMMGRAPH_C_EXPORT const char* ommgraph_last_error(void) {
    return lastError();
}

OMMGRAPH_C_EXPORT int64_t ommgraph_live_views(void) {
    return ManagedView::liveCount();
}

OMMGRAPH_C_EXPORT int ommgraph_context_live_views(void* context, int view, int64_t* count) {
    return guarded("ommgraph_context_live_views", [&] {
        if (context == nullptr || count == nullptr)
            throw DLPackError(OMMGRAPH_ERROR_ARGUMENT, "context and count must not be NULL");
        if (view != -1 && viewName(view)[0] == '\0')
            throw DLPackError(OMMGRAPH_ERROR_ARGUMENT, "unknown view number " + std::to_string(view) +
                                                           " (the views are 0 POSITIONS to 5 BOX, or -1 for every view)");
        *count = ManagedView::liveCountOf(context, view);
    });
}

OMMGRAPH_C_EXPORT int ommgraph_callback_force_create(OMMGraphForceCallback function, void* userData, void** force) {
    return guarded("ommgraph_callback_force_create", [&] {
        if (function == nullptr || force == nullptr)
            throw DLPackError(OMMGRAPH_ERROR_ARGUMENT, "function and force must not be NULL");
        CallbackForce* created = new CallbackForce();
        created->setFunction(reinterpret_cast<CallbackForce::Function>(function), userData);
        *force = static_cast<OpenMM::Force*>(created);
    });
}

OMMGRAPH_C_EXPORT int ommgraph_borrow_tensor(const DLTensor* tensor, int versioned, unsigned flags, void** out) {
    return guarded("ommgraph_borrow_tensor", [&] {
        if (tensor == nullptr || out == nullptr)
            throw DLPackError(OMMGRAPH_ERROR_ARGUMENT, "tensor and out must not be NULL");
        if (tensor->ndim < 1 || tensor->ndim > OMMGRAPH_VIEW_MAX_DIMS)
            throw DLPackError(OMMGRAPH_ERROR_ARGUMENT,
                              "only tensors of 1 or 2 dimensions can be borrowed (found ndim " + std::to_string(tensor->ndim) + ")");
        if (tensor->byte_offset != 0)
            throw DLPackError(OMMGRAPH_ERROR_ARGUMENT, "only tensors without a byte_offset can be borrowed (found byte_offset " +
                                                           std::to_string(tensor->byte_offset) + ")");
        if (tensor->shape == nullptr)
            throw DLPackError(OMMGRAPH_ERROR_ARGUMENT, "the tensor's shape must not be NULL");
        if (tensor->dtype.lanes != 1)
            throw DLPackError(OMMGRAPH_ERROR_ARGUMENT,
                              "only tensors of one lane can be borrowed (found " + std::to_string(tensor->dtype.lanes) + " lanes)");
        for (int i = 0; i < tensor->ndim; i++)
            if (tensor->shape[i] < 0)
                throw DLPackError(OMMGRAPH_ERROR_ARGUMENT,
                                  "the tensor's shape[" + std::to_string(i) + "] is negative (" + std::to_string(tensor->shape[i]) + ")");
        StateView view;
        view.layout.structSize = sizeof(OMMGraphViewDescriptor);
        view.layout.data = tensor->data;
        view.layout.deviceType = tensor->device.device_type;
        view.layout.deviceId = tensor->device.device_id;
        view.layout.dtypeCode = tensor->dtype.code;
        view.layout.dtypeBits = tensor->dtype.bits;
        view.layout.ndim = tensor->ndim;
        int64_t stride = 1;
        for (int i = tensor->ndim - 1; i >= 0; i--) {
            view.layout.shape[i] = tensor->shape[i];
            view.layout.strides[i] = tensor->strides != nullptr ? tensor->strides[i] : stride;
            stride *= tensor->shape[i];
        }
        uint64_t dlpackFlags = (flags & OMMGRAPH_VIEW_READ_ONLY) != 0 ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
        if (versioned)
            *out = ManagedView::createVersioned(std::move(view), {}, dlpackFlags, nullptr, nullptr);
        else
            *out = ManagedView::createLegacy(std::move(view), {}, nullptr, nullptr);
    });
}

OMMGRAPH_C_EXPORT void ommgraph_python_release(void* owner) {
    const PythonApi* python = PythonApi::find();
    if (owner == nullptr || python == nullptr || !python->isInitialized())
        return; // no interpreter (any more): nothing can be released
    int gil = python->gilStateEnsure();
    python->decRef(owner);
    python->gilStateRelease(gil);
}

OMMGRAPH_C_EXPORT void ommgraph_capsule_destructor(void* capsule) {
    const PythonApi* python = PythonApi::find();
    if (capsule == nullptr || python == nullptr)
        return;
    // Python runs capsule destructors with the GIL held.  A consumed capsule is
    // renamed "used_dltensor[_versioned]", is valid under neither name, and is left alone.
    if (python->capsuleIsValid(capsule, "dltensor_versioned")) {
        auto* tensor = static_cast<DLManagedTensorVersioned*>(python->capsuleGetPointer(capsule, "dltensor_versioned"));
        if (tensor != nullptr && tensor->deleter != nullptr)
            tensor->deleter(tensor);
    }
    else if (python->capsuleIsValid(capsule, "dltensor")) {
        auto* tensor = static_cast<DLManagedTensor*>(python->capsuleGetPointer(capsule, "dltensor"));
        if (tensor != nullptr && tensor->deleter != nullptr)
            tensor->deleter(tensor);
    }
}

} // extern "C"
