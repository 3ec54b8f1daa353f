#ifndef OPENMM_WINDOWS_EXPORT_GRAPH_H_
#define OPENMM_WINDOWS_EXPORT_GRAPH_H_

// Symbol visibility of the openmm-graph libraries (OpenMM's convention).
#if defined(_MSC_VER)
#if defined(OPENMM_GRAPH_BUILDING_SHARED_LIBRARY)
#define OPENMM_EXPORT_GRAPH __declspec(dllexport)
#else
#define OPENMM_EXPORT_GRAPH __declspec(dllimport)
#endif
#else
#define OPENMM_EXPORT_GRAPH __attribute__((visibility("default")))
#endif

#endif
