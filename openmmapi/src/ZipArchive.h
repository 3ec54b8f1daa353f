#ifndef OPENMM_GRAPH_ZIP_ARCHIVE_H_
#define OPENMM_GRAPH_ZIP_ARCHIVE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace GraphPlugin {

/**
 * Just enough of the zip format for an archive held in memory: what a
 * TorchScript archive (torch.jit.save) or an AOTInductor package is.  Zip64
 * records are understood; every offset and size is checked against the
 * buffer, so a damaged archive gives an error, never a read past its end.
 * Stored and deflated entries are understood (deflated ones inflated with
 * zlib, for the CRC-32 check only), and every entry read or checked must
 * match the CRC-32 and the size that the central directory records for it.
 */
class ZipArchive {
public:
    /** Whether the bytes start like a zip archive (a local file header). */
    static bool looksLikeZip(const std::string& bytes);
    /**
     * Check every entry of the archive: its local header, that its data lie
     * inside the archive, that it is stored or deflated (unencrypted), that
     * it decompresses to the recorded size and that its CRC-32 matches, and
     * that no two entries overlap (so the work is bounded by the archive's
     * size).  Throws std::runtime_error with a message naming a bad entry.
     */
    static void checkEntries(const std::string& bytes);
    /**
     * Find the entry whose name ends with `suffix` (e.g. "/extra/openmmgraph.json")
     * and copy its content into `content` (after checking its CRC-32).
     * Returns false when there is none; throws std::runtime_error with a
     * message for a damaged archive, a corrupt entry or a compressed entry.
     */
    static bool readEntry(const std::string& bytes, const std::string& suffix, std::string& content);
    /**
     * The entries' names in the order of the central directory (the order
     * LibTorch's zip reader indexes them in); throws std::runtime_error for a
     * damaged archive.
     */
    static std::vector<std::string> entryNames(const std::string& bytes);
    /** The CRC-32 of zip (ISO-HDLC, polynomial 0xEDB88320; zlib's crc32_z) of `size` bytes, continuing from `crc`. */
    static uint32_t crc32(const unsigned char* data, size_t size, uint32_t crc = 0);
};

} // namespace GraphPlugin

#endif
