#ifndef OPENMM_GRAPH_QUOTED_TEXT_H_
#define OPENMM_GRAPH_QUOTED_TEXT_H_

#include <string>

namespace GraphPlugin {

/**
 * A user's text for an error message, with control characters (NUL included) written as \xNN, so that the message
 * shows the whole value: an OpenMMException's what() ends at the first NUL. quotedText puts it in double quotes.
 */
inline std::string printableText(const std::string& value) {
    const char digits[] = "0123456789abcdef";
    std::string text;
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
    return text;
}

inline std::string quotedText(const std::string& value) {
    return "\"" + printableText(value) + "\"";
}

/**
 * An error message built from a file's contents: control characters written as \xNN (printableText) and at most
 * maxLength characters (a 5,000-digit number in a model file is not repeated whole).
 */
inline std::string fileErrorText(const std::string& message, size_t maxLength = 2000) {
    std::string text = printableText(message);
    if (text.size() > maxLength)
        text = text.substr(0, maxLength) + "... (" + std::to_string(text.size() - maxLength) + " more characters)";
    return text;
}

} // namespace GraphPlugin

#endif
