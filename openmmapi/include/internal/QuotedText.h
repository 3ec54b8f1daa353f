#ifndef OPENMM_GRAPH_QUOTED_TEXT_H_
#define OPENMM_GRAPH_QUOTED_TEXT_H_

#include <string>

namespace GraphPlugin {

/**
 * A user's text in double quotes for an error message, with control characters (NUL included) written as \xNN, so
 * that the message shows the whole value: an OpenMMException's what() ends at the first NUL.
 */
inline std::string quotedText(const std::string& value) {
    const char digits[] = "0123456789abcdef";
    std::string text = "\"";
    for (char c : value) {
        const unsigned char code = (unsigned char) c;
        if (code < 32 || code == 127) {
            text += "\\x";
            text += digits[code >> 4];
            text += digits[code & 15];
        }
        else
            text += c;
    }
    return text + "\"";
}

} // namespace GraphPlugin

#endif
