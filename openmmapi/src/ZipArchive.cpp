#include "ZipArchive.h"
#include <cstdint>
#include <stdexcept>

using namespace GraphPlugin;

namespace {

/** Little-endian reads with bounds checks. */
class Reader {
public:
    explicit Reader(const std::string& bytes) : bytes(bytes) {
    }
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

} // namespace

bool ZipArchive::looksLikeZip(const std::string& bytes) {
    return bytes.size() >= 4 && bytes.compare(0, 4, "PK\x03\x04", 4) == 0;
}

bool ZipArchive::readEntry(const std::string& bytes, const std::string& suffix, std::string& content) {
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
        const uint32_t method = in.u16(at + 10);
        uint64_t compressed = in.u32(at + 20), size = in.u32(at + 24), local = in.u32(at + 42);
        const uint32_t nameLength = in.u16(at + 28), extraLength = in.u16(at + 30), commentLength = in.u16(at + 32);
        in.check(at + 46, nameLength);
        const std::string name = bytes.substr(at + 46, nameLength);
        // Zip64 extended information: the 64-bit values of the fields that hold 0xFFFFFFFF, in order.
        for (uint64_t x = at + 46 + nameLength; x + 4 <= at + 46 + nameLength + extraLength;) {
            const uint32_t id = in.u16(x), length = in.u16(x + 2);
            if (id == 0x0001) {
                uint64_t field = x + 4;
                if (size == 0xFFFFFFFF)
                    size = in.u64(field), field += 8;
                if (compressed == 0xFFFFFFFF)
                    compressed = in.u64(field), field += 8;
                if (local == 0xFFFFFFFF)
                    local = in.u64(field);
            }
            x += 4 + length;
        }
        if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
            if (method != 0)
                throw std::runtime_error("the zip entry '" + name + "' is compressed (method " + std::to_string(method) +
                                         "); exported models store it uncompressed: write the archive again with "
                                         "openmmgraph.torch_export (or torch.jit.save; zip -0 for a package edited by hand)");
            if (in.u32(local) != LocalHeader)
                throw std::runtime_error("the zip entry '" + name + "' has no local header where the directory says");
            const uint64_t data = local + 30 + in.u16(local + 26) + in.u16(local + 28);
            in.check(data, size);
            content = bytes.substr(data, size);
            return true;
        }
        at += 46 + (uint64_t) nameLength + extraLength + commentLength;
    }
    return false;
}
