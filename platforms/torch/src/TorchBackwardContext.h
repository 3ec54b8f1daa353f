#ifndef OPENMM_GRAPH_TORCH_BACKWARD_CONTEXT_H_
#define OPENMM_GRAPH_TORCH_BACKWARD_CONTEXT_H_

#include <atomic>

namespace GraphPlugin {

/**
 * A TorchScript module's backward in a CUDA context of the caller's choice.
 *
 * Autograd runs the backward of CUDA tensors on its own worker thread per
 * device, which has the device's primary context current.  A model that runs
 * in OpenMM's own context (TorchCudaContext "openmm") needs that context
 * current there for its backward only: TorchModelRunner::run puts two
 * autograd nodes around the module (one on the energy, whose backward runs
 * first, and one on the positions and edge vectors, whose backward runs last:
 * every other node of the backward lies between them) that call enter() and
 * exit() on the thread that runs the backward.  If the backward fails between
 * the two, the runner calls exit() from a node of a second, one-node backward
 * on the same worker thread, so the worker thread is always left as it was.
 */
class TorchBackwardContext {
public:
    virtual ~TorchBackwardContext() = default;
    /** On the backward's thread, before its first node: make the model's context current. */
    void enterBackward() {
        enter();
        entered = true;
    }
    /** On the backward's thread, after its last node: restore the thread's context. */
    void exitBackward() {
        if (entered.exchange(false))
            exit();
    }
    /** Whether enterBackward() was not yet followed by exitBackward() (a backward failed between them). */
    bool isEntered() const {
        return entered;
    }

protected:
    virtual void enter() = 0;
    virtual void exit() = 0;

private:
    std::atomic<bool> entered{false};
};

} // namespace GraphPlugin

#endif
