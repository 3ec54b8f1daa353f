#ifndef OPENMM_GRAPH_SHA256_H_
#define OPENMM_GRAPH_SHA256_H_

#include <cstdint>
#include <string>

namespace GraphPlugin {

/**
 * The SHA-256 digest (FIPS 180-4) of `bytes`, as 64 lowercase hexadecimal digits: what `sha256sum` prints for a file
 * of those bytes and Python's hashlib.sha256(bytes).hexdigest() returns. Serialization records the embedded model's
 * digest with it, so that a model damaged or edited inside the XML is refused instead of loaded with other weights.
 * Host code; not on any hot path (one pass over the model's bytes, about 0.3 GB/s).
 */
inline std::string sha256Hex(const std::string& bytes) {
    static const uint32_t K[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be,
        0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa,
        0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85,
        0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
        0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
        0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
    // The message, a 0x80 byte, zeros to 56 mod 64, and its length in bits as a big-endian 64-bit number.
    const uint64_t length = bytes.size();
    const uint64_t blocks = (length + 8) / 64 + 1;
    unsigned char block[64];
    for (uint64_t n = 0; n < blocks; n++) {
        for (int i = 0; i < 64; i++) {
            const uint64_t at = 64 * n + i;
            if (at < length)
                block[i] = (unsigned char) bytes[at];
            else if (at == length)
                block[i] = 0x80;
            else if (n == blocks - 1 && i >= 56)
                block[i] = (unsigned char) ((8 * length) >> (8 * (63 - i)));
            else
                block[i] = 0;
        }
        uint32_t w[64];
        for (int i = 0; i < 16; i++)
            w[i] = ((uint32_t) block[4 * i] << 24) | ((uint32_t) block[4 * i + 1] << 16) | ((uint32_t) block[4 * i + 2] << 8) |
                   (uint32_t) block[4 * i + 3];
        for (int i = 16; i < 64; i++) {
            const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
            const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], x = h[7];
        for (int i = 0; i < 64; i++) {
            const uint32_t t1 = x + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
            const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            x = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b;
            b = a;
            a = t1 + t2;
        }
        h[0] += a;
        h[1] += b;
        h[2] += c;
        h[3] += d;
        h[4] += e;
        h[5] += f;
        h[6] += g;
        h[7] += x;
    }
    const char digits[] = "0123456789abcdef";
    std::string text;
    for (uint32_t word : h)
        for (int shift = 28; shift >= 0; shift -= 4)
            text += digits[(word >> shift) & 15];
    return text;
}

} // namespace GraphPlugin

#endif // OPENMM_GRAPH_SHA256_H_
