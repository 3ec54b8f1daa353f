#ifndef OPENMM_GRAPH_JSON_VALUE_H_
#define OPENMM_GRAPH_JSON_VALUE_H_

#include <map>
#include <string>
#include <vector>

namespace GraphPlugin {

/**
 * A parsed JSON value (RFC 8259), for the safetensors header and the JSON
 * strings inside its metadata.  The parser is strict (strings must be valid
 * UTF-8: no overlong form, surrogate, code point beyond U+10FFFF or truncated
 * sequence), bounded (nesting depth at most 64) and never reads outside the
 * buffer it is given; on bad input it throws an OpenMMException that says
 * what and at which byte of the text.  Private to the loader.
 */
class JsonValue {
public:
    enum class Kind { Null, Bool, Number, String, Array, Object };
    Kind kind = Kind::Null;
    bool boolean = false;
    double number = 0;
    std::string numberText; ///< the number as written (for exact integer checks)
    std::string string;
    std::vector<JsonValue> array;
    std::map<std::string, JsonValue> object; ///< duplicate keys are rejected
    std::vector<std::string> keyOrder;       ///< object keys in file order

    /**
     * Parse exactly one JSON value from [text, text + size) (surrounding
     * whitespace allowed).  `what` names the text in error messages.
     */
    static JsonValue parse(const char* text, size_t size, const std::string& what);
    /** "object", "array", ... for messages. */
    static const char* kindName(Kind kind);
};

} // namespace GraphPlugin

#endif
