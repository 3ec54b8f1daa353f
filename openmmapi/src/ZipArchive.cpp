#include "ZipArchive.h"
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <vector>
#include <zlib.h>

using namespace GraphPlugin;

namespace {

/** Little-endian reads with bounds checks. */
class Reader {
public:
    explicit Reader(const std::string& bytes) : bytes(bytes) {}
    uint64_t read(uint64_t offset, int width) const {
        check(offset, width);
        uint64_t value = 0;
        for (int b = width - 1; b >= 0; b--)
            value = (value << 8) | (uint8_t) bytes[offset + b];
        return value;
    }
    void check(uint64_t offset, uint64_t length) const {
        if (offset > bytes.size() || length > bytes.size() - offset)
            throw std::runtime_error("the zip archive is truncated or damaged (a record points past its end)");
    }
    uint32_t u16(uint64_t offset) const {
        return (uint32_t) read(offset, 2);
    }
    uint32_t u32(uint64_t offset) const {
        return (uint32_t) read(offset, 4);
    }
    uint64_t u64(uint64_t offset) const {
        return read(offset, 8);
    }
    size_t size() const {
        return bytes.size();
    }

private:
    const std::string& bytes;
};

const uint32_t LocalHeader = 0x04034b50, CentralHeader = 0x02014b50, EndOfDirectory = 0x06054b50, Zip64End = 0x06064b50,
               Zip64Locator = 0x07064b50;

/** One entry as the central directory describes it. */
struct Entry {
    std::string name;
    uint32_t flags = 0, method = 0, crc = 0;
    uint64_t compressed = 0, size = 0, local = 0;
};

/** An entry name for a message: bytes outside printable ASCII as \xNN (a message must stay valid UTF-8). */
std::string printable(const std::string& name) {
    std::string out;
    for (unsigned char c : name)
        if (c >= 0x20 && c < 0x7F)
            out += (char) c;
        else {
            char hex[8];
            std::snprintf(hex, sizeof(hex), "\\x%02X", c);
            out += hex;
        }
    return out;
}

std::string hex32(uint32_t value) {
    char text[16];
    std::snprintf(text, sizeof(text), "0x%08X", value);
    return text;
}

[[noreturn]] void entryError(const Entry& entry, const std::string& problem) {
    throw std::runtime_error("the zip entry '" + printable(entry.name) + "' " + problem);
}

/** Calls visit(entry) for each entry of the central directory, in order, until it returns true. */
template <class Visit> bool forEachEntry(const std::string& bytes, Visit visit) {
    Reader in(bytes);
    // The end-of-central-directory record: the last 22 bytes plus a comment of up to 65535 bytes.
    if (in.size() < 22)
        throw std::runtime_error("the zip archive is too short to hold its directory");
    uint64_t end = in.size() - 22;
    const uint64_t lowest = in.size() >= 22 + 65535 ? in.size() - 22 - 65535 : 0;
    while (in.u32(end) != EndOfDirectory) {
        if (end == lowest)
            throw std::runtime_error("the zip archive has no central directory (end record not found)");
        end--;
    }
    uint64_t entries = in.u16(end + 10), directory = in.u32(end + 16);
    if (entries == 0xFFFF || directory == 0xFFFFFFFF) {
        if (end < 20 || in.u32(end - 20) != Zip64Locator)
            throw std::runtime_error("the zip archive needs zip64 records but has no zip64 locator");
        const uint64_t record = in.u64(end - 20 + 8);
        if (in.u32(record) != Zip64End)
            throw std::runtime_error("the zip archive's zip64 end record is missing");
        entries = in.u64(record + 32);
        directory = in.u64(record + 48);
    }
    uint64_t at = directory;
    for (uint64_t e = 0; e < entries; e++) {
        if (in.u32(at) != CentralHeader)
            throw std::runtime_error("the zip archive's central directory is damaged");
        Entry entry;
        entry.flags = in.u16(at + 8);
        entry.method = in.u16(at + 10);
        entry.crc = in.u32(at + 16);
        entry.compressed = in.u32(at + 20);
        entry.size = in.u32(at + 24);
        entry.local = in.u32(at + 42);
        const uint32_t nameLength = in.u16(at + 28), extraLength = in.u16(at + 30), commentLength = in.u16(at + 32);
        in.check(at + 46, (uint64_t) nameLength + extraLength + commentLength);
        entry.name = bytes.substr(at + 46, nameLength);
        // Zip64 extended information: the 64-bit values of the fields that hold 0xFFFFFFFF, in order.
        for (uint64_t x = at + 46 + nameLength; x + 4 <= at + 46 + nameLength + extraLength;) {
            const uint32_t id = in.u16(x), length = in.u16(x + 2);
            if (id == 0x0001) {
                uint64_t field = x + 4;
                if (entry.size == 0xFFFFFFFF)
                    entry.size = in.u64(field), field += 8;
                if (entry.compressed == 0xFFFFFFFF)
                    entry.compressed = in.u64(field), field += 8;
                if (entry.local == 0xFFFFFFFF)
                    entry.local = in.u64(field);
            }
            x += 4 + length;
        }
        if (visit(entry))
            return true;
        at += 46 + (uint64_t) nameLength + extraLength + commentLength;
    }
    return false;
}

/** Where the entry's data start (after its local header), checked to lie inside the archive. */
uint64_t dataOffset(const std::string& bytes, const Entry& entry) {
    Reader in(bytes);
    if (entry.local > bytes.size() || bytes.size() - entry.local < 30 || in.u32(entry.local) != LocalHeader)
        entryError(entry, "has no local header where the directory says");
    const uint64_t data = entry.local + 30 + in.u16(entry.local + 26) + in.u16(entry.local + 28);
    if (data > bytes.size() || entry.compressed > bytes.size() - data)
        entryError(entry, "is truncated (its data run past the end of the archive)");
    return data;
}

/**
 * Inflate the raw deflate stream (RFC 1951) of an entry, `inputSize` bytes at `input`, with zlib, chunk by chunk:
 * returns the inflated size and its CRC-32 in `crc`, and appends the data to `out` when given (so a check alone holds
 * one chunk, never the whole entry).  A stream that inflates beyond `limit` bytes (the size the directory records),
 * ends early, is invalid or has bytes after its end throws naming the entry.
 */
uint64_t inflateEntry(const Entry& entry, const unsigned char* input, uint64_t inputSize, uint64_t limit, std::string* out, uint32_t& crc) {
    z_stream stream{};
    if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) // negative window bits: a raw stream, as zip stores it
        entryError(entry, "cannot be inflated: zlib could not start");
    std::vector<unsigned char> chunk(1 << 20);
    uint64_t consumed = 0, inflated = 0;
    crc = 0;
    std::string problem;
    while (problem.empty()) {
        if (stream.avail_in == 0 && consumed < inputSize) {
            const uint64_t take = std::min<uint64_t>(inputSize - consumed, 1u << 30);
            stream.next_in = const_cast<Bytef*>(input + consumed);
            stream.avail_in = (uInt) take;
            consumed += take;
        }
        stream.next_out = chunk.data();
        stream.avail_out = (uInt) chunk.size();
        const int status = inflate(&stream, Z_NO_FLUSH);
        const size_t produced = chunk.size() - stream.avail_out;
        if (produced > limit - std::min<uint64_t>(limit, inflated)) {
            problem = "is corrupt: it inflates to more than the " + std::to_string(limit) + " bytes the directory records";
            break;
        }
        inflated += produced;
        crc = ZipArchive::crc32(chunk.data(), produced, crc);
        if (out != nullptr)
            out->append(reinterpret_cast<const char*>(chunk.data()), produced);
        if (status == Z_STREAM_END) {
            const uint64_t left = stream.avail_in + (inputSize - consumed);
            if (left != 0)
                problem = "is corrupt: it has " + std::to_string(left) + " bytes after the end of its deflated data";
            break;
        }
        if (status == Z_BUF_ERROR && stream.avail_in == 0 && consumed == inputSize)
            problem = "is corrupt: its deflated stream ends early (before its last block)";
        else if (status != Z_OK && status != Z_BUF_ERROR)
            problem = std::string("is corrupt: its deflated data are invalid (zlib: ") +
                      (stream.msg ? stream.msg : "error " + std::to_string(status)) + ")";
    }
    inflateEnd(&stream);
    if (!problem.empty())
        entryError(entry, problem);
    return inflated;
}

/** Check one entry's data against its directory record; `content` receives the data when given. */
void checkEntry(const std::string& bytes, const Entry& entry, std::string* content) {
    if (entry.flags & 1)
        entryError(entry, "is encrypted");
    const uint64_t data = dataOffset(bytes, entry);
    const unsigned char* begin = reinterpret_cast<const unsigned char*>(bytes.data()) + data;
    uint32_t crc = 0;
    if (entry.method == 0) {
        if (entry.compressed != entry.size)
            entryError(entry, "is corrupt: it is stored, but the directory records " + std::to_string(entry.compressed) +
                                  " bytes in the archive and " + std::to_string(entry.size) + " bytes of content");
        crc = ZipArchive::crc32(begin, entry.size);
        if (content)
            content->assign(reinterpret_cast<const char*>(begin), entry.size);
    }
    else if (entry.method == 8) {
        // Deflate expands at most 1032-fold: a larger recorded size is damage (and must not size a buffer).
        if (entry.size / 1032 > entry.compressed)
            entryError(entry, "is corrupt: the directory records " + std::to_string(entry.size) + " bytes of content for " +
                                  std::to_string(entry.compressed) + " deflated bytes");
        std::string inflated;
        const uint64_t size = inflateEntry(entry, begin, entry.compressed, entry.size, content ? &inflated : nullptr, crc);
        if (size != entry.size)
            entryError(entry, "is corrupt: it inflates to " + std::to_string(size) + " bytes, the directory records " +
                                  std::to_string(entry.size));
        if (content)
            content->swap(inflated);
    }
    else
        entryError(entry,
                   "uses compression method " + std::to_string(entry.method) + "; only stored (0) and deflated (8) entries are understood");
    if (crc != entry.crc)
        entryError(entry,
                   "is corrupt: its CRC-32 is " + hex32(crc) + ", the archive records " + hex32(entry.crc) + " (the file is damaged)");
}

} // namespace

uint32_t ZipArchive::crc32(const unsigned char* data, size_t size, uint32_t crc) {
    return (uint32_t) crc32_z(crc, data, size);
}

bool ZipArchive::looksLikeZip(const std::string& bytes) {
    return bytes.size() >= 4 && bytes.compare(0, 4, "PK\x03\x04", 4) == 0;
}

void ZipArchive::checkEntries(const std::string& bytes) {
    // Entries lie apart in an archive.  A directory that points many entries at one deflated stream would make this
    // check inflate the same bytes once an entry (hours for a few MB at the deflate limit of 1032x), so an entry whose
    // local header and data overlap another's is refused before any is inflated: the work is then bounded by 1032
    // times the archive's size.
    std::vector<Entry> entries;
    forEachEntry(bytes, [&](const Entry& entry) {
        entries.push_back(entry);
        return false;
    });
    std::vector<std::pair<uint64_t, size_t>> starts; // (local header offset, entry index)
    for (size_t e = 0; e < entries.size(); e++)
        starts.emplace_back(entries[e].local, e);
    std::sort(starts.begin(), starts.end());
    for (size_t k = 1; k < starts.size(); k++) {
        const Entry& before = entries[starts[k - 1].second];
        const Entry& entry = entries[starts[k].second];
        if (dataOffset(bytes, before) + before.compressed > entry.local)
            entryError(entry, "overlaps the zip entry '" + printable(before.name) +
                                  "' in the archive (the directory points two entries at the same bytes: the file is damaged)");
    }
    for (const Entry& entry : entries)
        checkEntry(bytes, entry, nullptr);
}

bool ZipArchive::readEntry(const std::string& bytes, const std::string& suffix, std::string& content) {
    return forEachEntry(bytes, [&](const Entry& entry) {
        const std::string& name = entry.name;
        if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
            return false;
        if (entry.method != 0)
            entryError(entry, "is compressed (method " + std::to_string(entry.method) +
                                  "); exported models store it uncompressed: write the archive again with "
                                  "openmmgraph.torch_export (or torch.jit.save; zip -0 for a package edited by hand)");
        checkEntry(bytes, entry, &content);
        return true;
    });
}

std::vector<std::string> ZipArchive::entryNames(const std::string& bytes) {
    std::vector<std::string> names;
    forEachEntry(bytes, [&](const Entry& entry) {
        names.push_back(entry.name);
        return false;
    });
    return names;
}
