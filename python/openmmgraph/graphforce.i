/*
 * The SWIG interface of openmm-graph: GraphPlugin::GraphForce as
 * openmmgraph.graphforce.GraphForce, a subclass of openmm.Force.
 *
 * The module is built against the `openmm` Python package (it %imports
 * OpenMM's own SWIG headers and shares OpenMM's SWIG runtime), so a
 * GraphForce can be passed to System.addForce() and friends, and a Force
 * returned by OpenMM (System.getForce(), XmlSerializer) can be turned back
 * into a GraphForce with GraphForce.cast().
 *
 * Python-side conventions (documented on the class in %pythoncode below):
 *   - GraphForce(path): path is a str, bytes or os.PathLike.
 *   - GraphForce.fromModelBytes(data): data is bytes-like (bytes, bytearray,
 *     memoryview, a uint8 NumPy array); embedded NULs are kept.
 *   - getModelBytes() returns bytes.
 *   - getParticleParameters(index) returns (particle, type).
 *   - getParticleEnergies(context) returns a list of float, kJ/mol.
 *   - getCutoff() returns a float in nm.
 *   - C++ exceptions arrive as openmm.OpenMMException with the C++ message.
 */
%module(package="openmmgraph") graphforce

%include <typemaps.i>
%include <std_string.i>
/*
 * OpenMM's own interface warns about itself (its %apply of Vec3& OUTPUT,
 * nested classes, a member named None).  A pragma holds for the whole file,
 * so these three stay off for ours too: the Python tests check the typemaps
 * this file applies (getParticleParameters returning a tuple).
 */
#pragma SWIG nowarn=314,325,453
%import(module="openmm") "swig/OpenMMSwigHeaders.i"
%include "swig/typemaps.i"

%{
#include "GraphForce.h"
#include "CallbackForce.h"
#include "OpenMM.h"
#include "OpenMMAmoeba.h"
#include "OpenMMDrude.h"
#include "openmm/RPMDIntegrator.h"
#include "openmm/RPMDMonteCarloBarostat.h"
#include "openmm/OpenMMException.h"
#include "openmm/serialization/XmlSerializer.h"
#include <climits>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

/*
 * This module and openmm's _openmm must share one SWIG runtime, or OpenMM's
 * functions would not accept a GraphForce.  CMake passes the runtime version
 * found in the installed _openmm module.
 */
#ifdef GRAPH_OPENMM_SWIG_RUNTIME_VERSION
static_assert(std::string_view(SWIG_RUNTIME_VERSION) == std::string_view(GRAPH_OPENMM_SWIG_RUNTIME_VERSION),
              "openmm-graph: this SWIG uses another runtime version than the one openmm's _openmm module "
              "was built with; use a SWIG of the same major.minor series as OpenMM's");
#endif

/*
 * Raise openmm.OpenMMException (RuntimeError if openmm cannot be imported).
 * The message may quote bytes of the user's input (a path, a model header)
 * that are not UTF-8: they are kept as backslash escapes, so the message
 * always arrives instead of a UnicodeDecodeError.
 */
static void graphSetOpenMMException(const char* message) {
    PyObject* text = PyUnicode_DecodeUTF8(message, (Py_ssize_t) strlen(message), "backslashreplace");
    if (text == NULL) {
        PyErr_Clear();
        text = PyUnicode_FromString("(an error message that could not be decoded)");
    }
    PyObject* module = PyImport_ImportModule("openmm");
    PyObject* exceptionType = module != NULL ? PyObject_GetAttrString(module, "OpenMMException") : NULL;
    if (exceptionType == NULL) {
        PyErr_Clear();
        PyErr_SetObject(PyExc_RuntimeError, text);
    }
    else
        PyErr_SetObject(exceptionType, text);
    Py_XDECREF(text);
    Py_XDECREF(exceptionType);
    Py_XDECREF(module);
}
%}

/* C++ exceptions -> openmm.OpenMMException, as in OpenMM's own wrappers. */
%exception {
    try {
        $action
    } catch (std::exception& e) {
        graphSetOpenMMException(e.what());
        SWIG_fail;
    }
}

/* Evaluating the model can take a while: release the GIL, as Context.getState does. */
%exception GraphPlugin::GraphForce::getParticleEnergies {
    PyThreadState* savedThreadState = PyEval_SaveThread();
    try {
        $action
    } catch (std::exception& e) {
        PyEval_RestoreThread(savedThreadState);
        graphSetOpenMMException(e.what());
        SWIG_fail;
    }
    PyEval_RestoreThread(savedThreadState);
}

/* ---------------------------------------------------------------------------
 * Typemaps
 * ------------------------------------------------------------------------- */

/* GraphForce(path): str, bytes or os.PathLike, encoded like open() does. */
%typemap(in) const std::string& modelPath (std::string temp) {
    PyObject* fsPath = PyOS_FSPath($input);
    if (fsPath == NULL)
        SWIG_fail;
    PyObject* encoded = fsPath;
    if (PyUnicode_Check(fsPath)) {
        encoded = PyUnicode_EncodeFSDefault(fsPath);
        Py_DECREF(fsPath);
        if (encoded == NULL)
            SWIG_fail;
    }
    char* data = NULL;
    Py_ssize_t size = 0;
    if (PyBytes_AsStringAndSize(encoded, &data, &size) < 0) {
        Py_DECREF(encoded);
        SWIG_fail;
    }
    temp.assign(data, (size_t) size);
    Py_DECREF(encoded);
    if (temp.find('\0') != std::string::npos) {
        PyErr_SetString(PyExc_ValueError,
                        "GraphForce: the model path contains a NUL character; to create a GraphForce from the "
                        "content of a model file use GraphForce.fromModelBytes(data)");
        SWIG_fail;
    }
    $1 = &temp;
}
%typemap(freearg) const std::string& modelPath "";
%typemap(typecheck, precedence=SWIG_TYPECHECK_STRING) const std::string& modelPath {
    $1 = (PyUnicode_Check($input) || PyBytes_Check($input) || PyObject_HasAttrString($input, "__fspath__")) ? 1 : 0;
}

/* fromModelBytes(data): any bytes-like object, embedded NULs included; not str. */
%typemap(in) const std::string& modelBytes (std::string temp) {
    if (PyUnicode_Check($input)) {
        PyErr_SetString(PyExc_TypeError,
                        "GraphForce.fromModelBytes: expected bytes (the content of a model file), not str; "
                        "to read a model file use GraphForce(path)");
        SWIG_fail;
    }
    Py_buffer view;
    if (PyObject_GetBuffer($input, &view, PyBUF_SIMPLE) != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "GraphForce.fromModelBytes: expected a bytes-like object (the content of a model file), not %s",
                     Py_TYPE($input)->tp_name);
        SWIG_fail;
    }
    temp.assign((const char*) view.buf, (size_t) view.len);
    PyBuffer_Release(&view);
    $1 = &temp;
}
%typemap(freearg) const std::string& modelBytes "";
%typemap(typecheck, precedence=SWIG_TYPECHECK_STRING) const std::string& modelBytes {
    $1 = (!PyUnicode_Check($input) && PyObject_CheckBuffer($input)) ? 1 : 0;
}

/*
 * Property keys and values and type names: str only.  SWIG's own refusal named
 * no argument ("argument 3 of type 'std::string const &'"), and a property
 * value is easily passed as True; the message names the argument and, for a
 * value, that properties are text.
 */
%define GRAPH_TEXT_ARGUMENT(NAME, HINT)
%typemap(in) const std::string& NAME (std::string temp) {
    if (!PyUnicode_Check($input)) {
        PyErr_Format(PyExc_TypeError, "in method '$symname', argument '$1_name': expected a str, found %s%s",
                     Py_TYPE($input)->tp_name, HINT);
        SWIG_fail;
    }
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize($input, &size);
    if (data == NULL)
        SWIG_fail;
    temp.assign(data, (size_t) size);
    $1 = &temp;
}
%typemap(freearg) const std::string& NAME "";
%typemap(typecheck, precedence=SWIG_TYPECHECK_STRING) const std::string& NAME {
    $1 = PyUnicode_Check($input) ? 1 : 0;
}
%enddef
GRAPH_TEXT_ARGUMENT(key, "")
GRAPH_TEXT_ARGUMENT(value, " (property values are text, e.g. 'true', 'false' or '4')")
GRAPH_TEXT_ARGUMENT(name, "")

/* getModelBytes() -> bytes (the model is binary: never decode it as text). */
%typemap(out) const std::string& GraphPlugin::GraphForce::getModelBytes {
    $result = PyBytes_FromStringAndSize($1->data(), (Py_ssize_t) $1->size());
}

/* getParticleEnergies(context) -> list of float (kJ/mol). */
%typemap(out) std::vector<double> GraphPlugin::GraphForce::getParticleEnergies {
    const std::vector<double>& energies = $1;
    $result = PyList_New((Py_ssize_t) energies.size());
    if ($result == NULL)
        SWIG_fail;
    for (size_t i = 0; i < energies.size(); i++)
        PyList_SET_ITEM($result, (Py_ssize_t) i, PyFloat_FromDouble(energies[i]));
}

/* getPropertyKeys() -> list of str. */
%typemap(out) std::vector<std::string> {
    const std::vector<std::string>& values = $1;
    $result = PyList_New((Py_ssize_t) values.size());
    if ($result == NULL)
        SWIG_fail;
    for (size_t i = 0; i < values.size(); i++) {
        PyObject* item = PyUnicode_FromStringAndSize(values[i].data(), (Py_ssize_t) values[i].size());
        if (item == NULL) {
            Py_DECREF($result);
            SWIG_fail;
        }
        PyList_SET_ITEM($result, (Py_ssize_t) i, item);
    }
}

/* getProperties() -> dict of str: str. */
%typemap(out) const std::map<std::string, std::string>& {
    $result = PyDict_New();
    if ($result == NULL)
        SWIG_fail;
    for (const auto& entry : *$1) {
        PyObject* key = PyUnicode_FromStringAndSize(entry.first.data(), (Py_ssize_t) entry.first.size());
        PyObject* value = PyUnicode_FromStringAndSize(entry.second.data(), (Py_ssize_t) entry.second.size());
        int status = (key != NULL && value != NULL) ? PyDict_SetItem($result, key, value) : -1;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (status != 0) {
            Py_DECREF($result);
            SWIG_fail;
        }
    }
}

/*
 * int arguments take any Python integer, including NumPy's (anything with
 * __index__, as OpenMM's own forces do; grades.lattice_system returns int64
 * types), but not floats; a value outside C's int is an OverflowError.
 */
%typemap(in) int (long long value, int overflow = 0) {
    PyObject* index = PyNumber_Index($input);
    if (index == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "in method '$symname', argument '$1_name': expected an integer, found %s",
                     Py_TYPE($input)->tp_name);
        SWIG_fail;
    }
    value = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (overflow != 0 || value < INT_MIN || value > INT_MAX) {
        PyErr_Format(PyExc_OverflowError, "in method '$symname', argument '$1_name': %S is out of the range of a C int",
                     $input);
        SWIG_fail;
    }
    $1 = (int) value;
}
%typemap(typecheck, precedence=SWIG_TYPECHECK_INTEGER) int {
    $1 = PyIndex_Check($input) ? 1 : 0;
}

/* getParticleParameters(index) -> (particle, type), a tuple. */
%typemap(in, numinputs=0) (int& particle, int& type) (int particleValue = 0, int typeValue = 0) {
    $1 = &particleValue;
    $2 = &typeValue;
}
%typemap(argout) (int& particle, int& type) {
    Py_XDECREF($result);
    $result = Py_BuildValue("(ii)", *$1, *$2);
    if ($result == NULL)
        SWIG_fail;
}

/* ---------------------------------------------------------------------------
 * The class
 * ------------------------------------------------------------------------- */

#define OPENMM_EXPORT_GRAPH
#define OPENMM_EXPORT_GRAPH_DLPACK
%ignore GraphPlugin::CallbackForce::setFunction;
%ignore GraphPlugin::CallbackForce::getFunction;
%ignore GraphPlugin::CallbackForce::getUserData;
%ignore GraphPlugin::GraphModel;
%ignore GraphPlugin::GraphForce::getModel;
%newobject GraphPlugin::GraphForce::fromModelBytes;
%newobject GraphPlugin::GraphForce::__copy__;
%newobject GraphPlugin::GraphForce::_deserializeXml;
%rename(_cast) GraphPlugin::GraphForce::cast;

%feature("docstring") GraphPlugin::GraphForce "
A machine-learned graph potential (openmm-graph's compressed model format)
applied to a chosen set of particles of a System.

    force = GraphForce('model.safetensors')        # str or os.PathLike
    force = GraphForce.fromModelBytes(data)        # bytes of a model file
    for atom in topology.atoms():
        force.addParticle(atom.index, force.getTypeIndex(atom.element.symbol))
    system.addForce(force)

openmmgraph.createGraphForce(topology, model) does the loop above by element.
Units: nm, kJ/mol, kJ/mol/nm (plain floats, no openmm.unit quantities).
Errors from the C++ library raise openmm.OpenMMException.
A GraphForce taken back from a System (system.getForce(i)) is an
openmm.Force: use GraphForce.cast(force) to get the GraphForce.
";

%include "GraphForce.h"

/* The C++ class behind openmmgraph.dlpack.callback_force (which sets the function through ctypes). */
%include "CallbackForce.h"

%extend GraphPlugin::GraphForce {
    /* A non-owning GraphForce view of a Force; throws when it is not a GraphForce. */
    static GraphPlugin::GraphForce& cast(OpenMM::Force& force) {
        GraphPlugin::GraphForce* graphForce = dynamic_cast<GraphPlugin::GraphForce*>(&force);
        if (graphForce == NULL)
            throw OpenMM::OpenMMException("GraphForce.cast: the force '" + force.getName() +
                                          "' is not a GraphForce (use GraphForce.isinstance(force) to test first)");
        return *graphForce;
    }

    static bool _isGraphForce(OpenMM::Force& force) {
        return dynamic_cast<GraphPlugin::GraphForce*>(&force) != NULL;
    }

    /* A new, independent GraphForce equal to this one (the model is shared, it is immutable). */
    GraphPlugin::GraphForce* __copy__() {
        return new GraphPlugin::GraphForce(*$self);
    }

    /*
     * A new GraphForce from the XML of XmlSerializer.serialize(force).  GraphForce._deserialize checks first that the
     * root element's type is GraphForce: XmlSerializer::deserialize<T> reinterprets whatever object the XML describes
     * as a T, so that check, not a cast here, is what makes this safe.
     */
    static GraphPlugin::GraphForce* _deserializeXml(const std::string& xml) {
        std::stringstream stream(xml);
        return OpenMM::XmlSerializer::deserialize<GraphPlugin::GraphForce>(stream);
    }

    %pythoncode %{
    @staticmethod
    def cast(force):
        """Return the GraphForce that an openmm.Force (e.g. system.getForce(i)
        or a Force read back with XmlSerializer) is.  The result is the same
        C++ object, not a copy.  A System's force stays the System's: the
        result is valid as long as the System is, and keeps the Force object
        passed in alive.  A Force that owns its object (read back with
        XmlSerializer) hands it to the result, which can then be added to a
        System (add the result, not the Force passed in, which stays valid as
        long as the result does).
        Raises openmm.OpenMMException when the force is not a GraphForce."""
        result = _graphforce.GraphForce__cast(force)
        if getattr(force, "thisown", False):
            # force owns its C++ object (a Force read back with XmlSerializer, not one of a System's): the result
            # takes it over, so that it can be added to a System; force stays valid as long as the result does.
            result.thisown = True
            force.thisown = False
            force._graphOwner = result
        else:
            result._graphOwner = force
        return result

    @staticmethod
    def _deserialize(text):
        """A new GraphForce from the XML of XmlSerializer.serialize(force), after checking that the XML's root
        element is one (OpenMMException otherwise)."""
        import io
        import re
        import openmm
        from xml.etree import ElementTree

        if not isinstance(text, str):
            raise TypeError(f"GraphForce: the serialized state must be a str of XML, found {type(text).__name__}")
        try:
            _, root = next(ElementTree.iterparse(io.StringIO(text), events=("start",)))
        except (ElementTree.ParseError, StopIteration) as error:
            raise openmm.OpenMMException(f"GraphForce: the serialized state is not XML ({error})") from None
        kind = root.get("type")
        if kind != "GraphForce":
            held = f"a {kind!r}" if kind is not None else f"a <{root.tag}> element without a type"
            raise openmm.OpenMMException(f"GraphForce: the XML holds {held}, not a GraphForce")
        # OpenMM's XML reader (TinyXML) and ElementTree must see the same root element: they read comments, processing
        # instructions and DOCTYPEs differently (a decoy element inside a comment is TinyXML's root), so nothing but
        # an XML declaration and white space may come before it, as in what XmlSerializer.serialize writes.
        if not re.match(r"\s*(<\?xml[^<>]*\?>\s*)?<Force[\s/>]", text):
            raise openmm.OpenMMException("GraphForce: the serialized state must be the XML of XmlSerializer.serialize(force): "
                                         "an XML declaration at most, then the <Force> element (found a comment, processing "
                                         "instruction, DOCTYPE or other element before it)")
        return GraphForce._deserializeXml(text)

    @staticmethod
    def isinstance(force):
        """True if force (any Python object) is a GraphForce, including an
        openmm.Force that GraphForce.cast() would accept."""
        import openmm

        if not isinstance(force, openmm.Force):
            return False
        return _graphforce.GraphForce__isGraphForce(force)

    def __repr__(self):
        types = ", ".join(self.getTypeName(t) for t in range(self.getNumTypes()))
        return (f"<openmmgraph.GraphForce: types {types}, {self.getNumParticles()} particles, "
                f"cutoff {self.getCutoff():g} nm, periodic {self.usesPeriodicBoundaryConditions()}>")

    def __deepcopy__(self, memo):
        return self.__copy__()

    def __setstate__(self, serializationString):
        # openmm.Force.__setstate__ would leave a plain Force behind.
        force = GraphForce._deserialize(serializationString)
        self.this = force.this
    %}
};
