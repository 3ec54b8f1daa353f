#ifndef OPENMM_GRAPH_FORCE_IMPL_H_
#define OPENMM_GRAPH_FORCE_IMPL_H_

#include "GraphForce.h"
#include "internal/windowsExportGraph.h"
#include "openmm/Kernel.h"
#include "openmm/internal/ForceImpl.h"
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace GraphPlugin {

/**
 * The internal implementation of GraphForce: validates the force against the
 * System once, at Context creation, and dispatches to the platform's kernel.
 */
class OPENMM_EXPORT_GRAPH GraphForceImpl : public OpenMM::ForceImpl {
public:
    explicit GraphForceImpl(const GraphForce& owner);
    void initialize(OpenMM::ContextImpl& context) override;
    const GraphForce& getOwner() const override {
        return owner;
    }
    void updateContextState(OpenMM::ContextImpl& context, bool& forcesInvalid) override {}
    double calcForcesAndEnergy(OpenMM::ContextImpl& context, bool includeForces, bool includeEnergy, int groups) override;
    std::map<std::string, double> getDefaultParameters() override {
        return {};
    }
    std::vector<std::string> getKernelNames() override;
    /**
     * Copy the force's particle types to the kernel.  Anything else that
     * changed since the Context was created (particles, periodic boundary
     * conditions, properties) is refused with an OpenMMException that says
     * to reinitialize the Context.
     */
    void updateParametersInContext(OpenMM::ContextImpl& context);
    /**
     * E_i (kJ/mol) in the force's particle order, at the Context's positions;
     * with CheckFinite (not "false") a non-finite E_i is an OpenMMException
     * naming the particle, as a non-finite total energy is in execute().
     */
    std::vector<double> getParticleEnergies(OpenMM::ContextImpl& context);
    /**
     * Check a force against a System (particle indices in range and unique,
     * types in range, box large enough for the cut-off).  Throws an
     * OpenMMException that says what is wrong and how to fix it.
     */
    static void validate(const GraphForce& force, const OpenMM::System& system);
    /**
     * Check that a cut-off (nm) is at most half the smallest height (nm) of
     * the periodic box a, b, c (OpenMM's reduced form, so the heights are
     * a[0], b[1], c[2]): then only one image of a pair lies within the
     * cut-off.  The comparison allows a relative rounding of 1e-12, so that
     * a cut-off converted from the model's unit (6 angstrom is
     * 0.6000000000000001 nm) fits a box of exactly twice its length; the
     * tables vanish with two derivatives at the cut-off, so the pairs that
     * this admits contribute nothing.  Every platform calls this one check.
     * Throws an OpenMMException naming both lengths and the box needed, or
     * naming the vector when a box component is NaN or infinite (OpenMM
     * itself accepts those).
     */
    static void checkCutoffFitsBox(double cutoff, const OpenMM::Vec3& a, const OpenMM::Vec3& b, const OpenMM::Vec3& c);

private:
    const GraphForce& owner;
    OpenMM::Kernel kernel;
    /** The settings the kernel was initialized with: updateParametersInContext refuses to change them. */
    bool initialPeriodic = false;
    std::map<std::string, std::string> initialProperties;
};

} // namespace GraphPlugin

#endif
