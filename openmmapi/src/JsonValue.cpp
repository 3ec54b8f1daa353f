#include "JsonValue.h"
#include "internal/QuotedText.h"
#include "openmm/OpenMMException.h"
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

using namespace GraphPlugin;
using OpenMM::OpenMMException;

namespace {

const int MaxDepth = 64;

class Parser {
public:
    Parser(const char* text, size_t size, const std::string& what) : text(text), size(size), pos(0), what(what) {}
    JsonValue parseDocument() {
        skipSpace();
        JsonValue value = parseValue(0);
        skipSpace();
        if (pos != size)
            fail("unexpected text after the end of the value");
        return value;
    }

private:
    const char* text;
    size_t size, pos;
    const std::string& what;

    [[noreturn]] void fail(const std::string& message) const {
        std::stringstream s;
        s << "GraphForce: model file: " << what << " is not valid JSON: " << message << " at byte " << pos;
        throw OpenMMException(fileErrorText(s.str()));
    }
    bool atEnd() const {
        return pos >= size;
    }
    char peek() const {
        return atEnd() ? '\0' : text[pos];
    }
    void skipSpace() {
        while (!atEnd() && (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n' || text[pos] == '\r'))
            pos++;
    }
    void expectWord(const char* word) {
        for (const char* c = word; *c; c++) {
            if (atEnd() || text[pos] != *c)
                fail(std::string("expected '") + word + "'");
            pos++;
        }
    }
    /** A byte for a message: 'c' when printable ASCII, else byte 0xNN (a message must stay valid UTF-8). */
    static std::string describe(char c) {
        const unsigned char b = (unsigned char) c;
        if (b >= 0x20 && b < 0x7F)
            return std::string("'") + c + "'";
        char hex[16];
        std::snprintf(hex, sizeof(hex), "byte 0x%02X", b);
        return hex;
    }
    /**
     * Check the UTF-8 sequence that starts at the byte `start` (0x80 or more) of a string and return its
     * length: exactly the well-formed sequences of RFC 3629 (no overlong form, no surrogate, nothing
     * beyond U+10FFFF, no truncated sequence), as Python's UTF-8 decoder requires.
     */
    size_t checkUtf8(size_t start) {
        const unsigned char lead = (unsigned char) text[start];
        size_t length = 0;
        unsigned char low = 0x80, high = 0xBF; // the range of the second byte
        if (lead >= 0xC2 && lead <= 0xDF)
            length = 2;
        else if (lead >= 0xE0 && lead <= 0xEF) {
            length = 3;
            if (lead == 0xE0)
                low = 0xA0;
            if (lead == 0xED)
                high = 0x9F;
        }
        else if (lead >= 0xF0 && lead <= 0xF4) {
            length = 4;
            if (lead == 0xF0)
                low = 0x90;
            if (lead == 0xF4)
                high = 0x8F;
        }
        std::string problem;
        if (lead < 0xC0)
            problem = "a continuation byte without a lead byte";
        else if (lead < 0xC2)
            problem = "an overlong encoding";
        else if (lead > 0xF4)
            problem = "a byte that never occurs in UTF-8";
        for (size_t i = 1; problem.empty() && i < length; i++) {
            if (start + i >= size) {
                problem = "a truncated sequence (the text ends inside it)";
                break;
            }
            const unsigned char next = (unsigned char) text[start + i];
            if (next < 0x80 || next > 0xBF)
                problem = "a truncated sequence (byte " + std::to_string(i + 1) + " is not a continuation byte)";
            else if (i == 1 && next < low)
                problem = "an overlong encoding";
            else if (i == 1 && next > high)
                problem = lead == 0xED ? "a surrogate (U+D800 to U+DFFF)" : "a code point beyond U+10FFFF";
        }
        if (!problem.empty()) {
            pos = start;
            fail("a string is not valid UTF-8: the sequence starting with " + describe(text[start]) + " is " + problem);
        }
        return length;
    }
    JsonValue parseValue(int depth) {
        if (depth > MaxDepth)
            fail("nesting deeper than 64 levels");
        if (atEnd())
            fail("unexpected end of text");
        JsonValue value;
        char c = peek();
        if (c == '{') {
            value.kind = JsonValue::Kind::Object;
            pos++;
            skipSpace();
            if (peek() == '}') {
                pos++;
                return value;
            }
            while (true) {
                skipSpace();
                if (peek() != '"')
                    fail("expected a string key");
                std::string key = parseString();
                skipSpace();
                if (peek() != ':')
                    fail("expected ':'");
                pos++;
                skipSpace();
                JsonValue member = parseValue(depth + 1);
                if (value.object.count(key))
                    fail("duplicate key \"" + key + "\"");
                value.keyOrder.push_back(key);
                value.object.emplace(key, std::move(member));
                skipSpace();
                if (peek() == ',') {
                    pos++;
                    continue;
                }
                if (peek() == '}') {
                    pos++;
                    return value;
                }
                fail("expected ',' or '}'");
            }
        }
        if (c == '[') {
            value.kind = JsonValue::Kind::Array;
            pos++;
            skipSpace();
            if (peek() == ']') {
                pos++;
                return value;
            }
            while (true) {
                skipSpace();
                value.array.push_back(parseValue(depth + 1));
                skipSpace();
                if (peek() == ',') {
                    pos++;
                    continue;
                }
                if (peek() == ']') {
                    pos++;
                    return value;
                }
                fail("expected ',' or ']'");
            }
        }
        if (c == '"') {
            value.kind = JsonValue::Kind::String;
            value.string = parseString();
            return value;
        }
        if (c == 't') {
            expectWord("true");
            value.kind = JsonValue::Kind::Bool;
            value.boolean = true;
            return value;
        }
        if (c == 'f') {
            expectWord("false");
            value.kind = JsonValue::Kind::Bool;
            return value;
        }
        if (c == 'n') {
            expectWord("null");
            return value;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            value.kind = JsonValue::Kind::Number;
            size_t start = pos;
            if (peek() == '-')
                pos++;
            if (peek() == '0')
                pos++;
            else if (peek() >= '1' && peek() <= '9')
                while (peek() >= '0' && peek() <= '9')
                    pos++;
            else
                fail("bad number");
            if (peek() == '.') {
                pos++;
                if (!(peek() >= '0' && peek() <= '9'))
                    fail("bad number");
                while (peek() >= '0' && peek() <= '9')
                    pos++;
            }
            if (peek() == 'e' || peek() == 'E') {
                pos++;
                if (peek() == '+' || peek() == '-')
                    pos++;
                if (!(peek() >= '0' && peek() <= '9'))
                    fail("bad number");
                while (peek() >= '0' && peek() <= '9')
                    pos++;
            }
            value.numberText.assign(text + start, pos - start);
            errno = 0;
            value.number = std::strtod(value.numberText.c_str(), nullptr);
            return value;
        }
        fail("unexpected character " + describe(c));
    }
    static void appendUtf8(std::string& out, unsigned code) {
        if (code < 0x80)
            out += (char) code;
        else if (code < 0x800) {
            out += (char) (0xC0 | (code >> 6));
            out += (char) (0x80 | (code & 0x3F));
        }
        else if (code < 0x10000) {
            out += (char) (0xE0 | (code >> 12));
            out += (char) (0x80 | ((code >> 6) & 0x3F));
            out += (char) (0x80 | (code & 0x3F));
        }
        else {
            out += (char) (0xF0 | (code >> 18));
            out += (char) (0x80 | ((code >> 12) & 0x3F));
            out += (char) (0x80 | ((code >> 6) & 0x3F));
            out += (char) (0x80 | (code & 0x3F));
        }
    }
    unsigned parseHex4() {
        unsigned code = 0;
        for (int i = 0; i < 4; i++) {
            if (atEnd())
                fail("unexpected end of text in \\u escape");
            char h = text[pos++];
            code <<= 4;
            if (h >= '0' && h <= '9')
                code |= h - '0';
            else if (h >= 'a' && h <= 'f')
                code |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F')
                code |= h - 'A' + 10;
            else
                fail("bad \\u escape");
        }
        return code;
    }
    std::string parseString() {
        pos++; // opening quote
        std::string out;
        while (true) {
            if (atEnd())
                fail("unterminated string");
            char c = text[pos++];
            if (c == '"')
                return out;
            if ((unsigned char) c < 0x20) {
                pos--;
                fail("control character in string");
            }
            if ((unsigned char) c >= 0x80) {
                const size_t length = checkUtf8(pos - 1);
                out.append(text + pos - 1, length);
                pos += length - 1;
                continue;
            }
            if (c != '\\') {
                out += c;
                continue;
            }
            if (atEnd())
                fail("unterminated string");
            char e = text[pos++];
            switch (e) {
            case '"':
                out += '"';
                break;
            case '\\':
                out += '\\';
                break;
            case '/':
                out += '/';
                break;
            case 'b':
                out += '\b';
                break;
            case 'f':
                out += '\f';
                break;
            case 'n':
                out += '\n';
                break;
            case 'r':
                out += '\r';
                break;
            case 't':
                out += '\t';
                break;
            case 'u': {
                unsigned code = parseHex4();
                if (code >= 0xD800 && code < 0xDC00) {
                    if (pos + 2 > size || text[pos] != '\\' || text[pos + 1] != 'u')
                        fail("unpaired surrogate in \\u escape");
                    pos += 2;
                    unsigned low = parseHex4();
                    if (low < 0xDC00 || low >= 0xE000)
                        fail("bad surrogate pair in \\u escape");
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                }
                else if (code >= 0xDC00 && code < 0xE000)
                    fail("unpaired surrogate in \\u escape");
                appendUtf8(out, code);
                break;
            }
            default:
                fail("bad escape: '\\' followed by " + describe(e));
            }
        }
    }
};

} // namespace

JsonValue JsonValue::parse(const char* text, size_t size, const std::string& what) {
    return Parser(text, size, what).parseDocument();
}

const char* JsonValue::kindName(Kind kind) {
    switch (kind) {
    case Kind::Null:
        return "null";
    case Kind::Bool:
        return "a boolean";
    case Kind::Number:
        return "a number";
    case Kind::String:
        return "a string";
    case Kind::Array:
        return "an array";
    case Kind::Object:
        return "an object";
    }
    return "?";
}
