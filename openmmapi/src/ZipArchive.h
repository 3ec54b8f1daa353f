#ifndef OPENMM_GRAPH_ZIP_ARCHIVE_H_
#define OPENMM_GRAPH_ZIP_ARCHIVE_H_

#include <string>

namespace GraphPlugin {

/**
 * Just enough of the zip format to read one stored (uncompressed) entry of an
 * archive held in memory: what a TorchScript archive (torch.jit.save) is.
 * Zip64 records are understood; every offset and size is checked against the
 * buffer, so a damaged archive gives an error, never a read past its end.
 */
class ZipArchive {
public:
    /** Whether the bytes start like a zip archive (a local file header). */
    static bool looksLikeZip(const std::string& bytes);
    /**
     * Find the entry whose name ends with `suffix` (e.g. "/extra/openmmgraph.json")
     * and copy its content into `content`.  Returns false when there is none;
     * throws std::runtime_error with a message for a damaged archive or a
     * compressed entry.
     */
    static bool readEntry(const std::string& bytes, const std::string& suffix, std::string& content);
};

} // namespace GraphPlugin

#endif
