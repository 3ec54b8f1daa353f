// The dense kernels of the CUDA platform (DenseLayerKernels.cu, linked into
// this test as a static library) give bitwise the same layer outputs, act'(z) and input gradients
// for every row tile they can be launched with: the 8 x 32 tiles streamed
// through shared memory, the 16-, 32- and 64-row tiles and (float) the
// 128 x 128 tiles, both with k-slices prefetched through registers and
// streamed by asynchronous copies (where configureDenseLayers allows it), and
// the streamed 64 x 128 tiles (where it gives 2).  The pipeline picks a tile from the batch's size and the
// device (chooseDenseTileRows); this is what makes the choice free.  Two
// type groups of 37 and 50 rows (tiles cut across the group boundary), or of
// 150 and 60 rows in a chunk that starts at row 23 (whole 128-row tiles, and
// chunk arrays indexed from the chunk's start), widths that are not multiples
// of any tile or k-slice, and 256 x 128 on 150 rows (a whole 128 x 128 tile
// with K a multiple of the slice: the streamed kernel's unchecked copies, in
// both passes), residual and plain layers, rows read and written through a
// node map; the backward also with DenseBatch::gradScale (its product with
// the unscaled input gradient, bitwise); the streamed 128 x 128 tiles also
// with the transposed weights (DenseBatch::weightT: the forward's 16-byte
// copies of W^T where N is a multiple of 4; otherwise, and without weightT,
// the forward takes the register kernel).
#include "CudaRuntimeTest.h"
#include "GraphKernelLaunch.h"
#include <algorithm>
#include <cstdio>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace GraphPlugin;

namespace {

template <typename real> struct Buffer {
    real* data = nullptr;
    size_t size = 0;
    explicit Buffer(size_t size) : size(size) {
        EXPECT_EQ(cudaSuccess, cudaMalloc(&data, std::max<size_t>(1, size) * sizeof(real)));
        EXPECT_EQ(cudaSuccess, cudaMemset(data, 0, std::max<size_t>(1, size) * sizeof(real)));
    }
    Buffer(const std::vector<real>& values) : Buffer(values.size()) {
        EXPECT_EQ(cudaSuccess, cudaMemcpy(data, values.data(), size * sizeof(real), cudaMemcpyHostToDevice));
    }
    ~Buffer() {
        cudaFree(data);
    }
    std::vector<real> download() const {
        std::vector<real> values(size);
        EXPECT_EQ(cudaSuccess, cudaMemcpy(values.data(), data, size * sizeof(real), cudaMemcpyDeviceToHost));
        return values;
    }
};

template <typename real> std::vector<real> randomValues(size_t count, std::mt19937& rng, double scale) {
    std::uniform_real_distribution<double> uniform(-scale, scale);
    std::vector<real> values(count);
    for (real& v : values)
        v = (real) uniform(rng);
    return values;
}

/**
 * Every buffer one layer's forward and backward write, downloaded; scaledGradInput: the backward once more with
 * DenseBatch::gradScale (DenseLayerCase::scale).
 */
template <typename real> struct LayerResult { std::vector<real> output, derivative, gradInput, scaledGradInput; };

template <typename real> class DenseLayerCase {
public:
    /**
     * outPad: extra columns in the rows of the output-side arrays (out, act'(z), dE/d(out)): their stride is N + outPad.
     * The chunk is rows chunkStart .. chunkStart + rows0 + rows1 - 1 of the type-sorted node list (groups of rows0 and
     * rows1 rows); the node list has chunkStart + rows0 + rows1 nodes, arrays by node that many rows, chunk arrays
     * rows0 + rows1.
     */
    DenseLayerCase(int K, int N, bool residual, int activation, bool byNode, int outPad, int rows0 = 37, int rows1 = 50, int chunkStart = 0)
        : K(K), N(N), S(N + outPad), Rows0(rows0), Rows1(rows1), Rows(rows0 + rows1), ChunkStart(chunkStart), residual(residual),
          activation(activation), byNode(byNode), rng(K * 131 + N + (residual ? 7 : 0) + rows0) {
        for (int g = 0; g < 2; g++) {
            const std::vector<real> w = randomValues<real>((size_t) N * K, rng, 1.0 / std::sqrt((double) K)); // [N][K]
            weights.emplace_back(new Buffer<real>(w));
            weightsT.emplace_back(new Buffer<real>(transposedWeights(w, K, N)));
            biases.emplace_back(new Buffer<real>(randomValues<real>(N, rng, 0.5)));
            timesteps.emplace_back(new Buffer<real>(randomValues<real>(N, rng, 0.3)));
        }
        std::vector<int> nodes(ChunkStart + Rows);
        std::iota(nodes.begin(), nodes.end(), 0);
        std::shuffle(nodes.begin(), nodes.end(), rng);
        rowNodes.reset(new Buffer<int>(nodes));
        input.reset(new Buffer<real>(randomValues<real>((size_t) Rows * K, rng, 1.5)));
        gradOutput.reset(new Buffer<real>(randomValues<real>((size_t) byNodeRows() * S, rng, 1.0)));
        scaleValues = randomValues<real>((size_t) Rows * K, rng, 1.0);
        scaleBuffer.reset(new Buffer<real>(scaleValues));
    }

    /** The gradScale of the second backward ([local row][K], the input gradient's layout). */
    const std::vector<real>& scale() const {
        return scaleValues;
    }

    /** transposed: with DenseBatch::weightT; half: the streamed 64 x 128 tiles (DenseBatch::streamedHalf). */
    DenseBatch<real> batch(int tileRows, bool streamed, bool transposed, bool half) const {
        DenseBatch<real> b{};
        b.numGroups = 2;
        b.tileRows = tileRows;
        b.streamedWide = streamed ? 1 : 0;
        b.streamedHalf = half ? 1 : 0;
        b.chunkStart = ChunkStart;
        const int rows[2] = {Rows0, Rows1};
        b.rowStart[0] = ChunkStart;
        for (int g = 0; g < 2; g++) {
            b.rowStart[g + 1] = b.rowStart[g] + rows[g];
            b.weight[g] = weights[g]->data;
            b.weightT[g] = transposed ? weightsT[g]->data : nullptr;
            b.bias[g] = biases[g]->data;
            b.timestep[g] = residual ? timesteps[g]->data : nullptr;
            b.energyShift[g] = 0;
        }
        setDenseTileStarts(b);
        return b;
    }

    /** Forward (z = W h + b, out, act'(z)) and backward (dE/dh from dE/d(out), then again with gradScale) with one tile. */
    LayerResult<real> run(int tileRows, bool streamed = false, bool transposed = false, bool half = false) const {
        Buffer<real> output((size_t) byNodeRows() * S), derivative((size_t) Rows * S), gradInput((size_t) Rows * K),
            scaledGradInput((size_t) Rows * K);
        const DenseBatch<real> b = batch(tileRows, streamed, transposed, half);
        launchDenseForward<real>(b, rowNodes->data, input->data, K, K, N, activation, residual, derivative.data, output.data, S, byNode, 0);
        launchDenseBackward<real>(b, rowNodes->data, gradOutput->data, S, byNode, derivative.data, S, K, N, activation, residual,
                                  gradInput.data, K, 0);
        DenseBatch<real> scaled = b;
        scaled.gradScale = scaleBuffer->data;
        scaled.gradScaleStride = K;
        launchDenseBackward<real>(scaled, rowNodes->data, gradOutput->data, S, byNode, derivative.data, S, K, N, activation, residual,
                                  scaledGradInput.data, K, 0);
        EXPECT_EQ(cudaSuccess, cudaDeviceSynchronize());
        return {output.download(), derivative.download(), gradInput.download(), scaledGradInput.download()};
    }

private:
    /** Rows of the arrays that may be read or written by node (out, dE/d(out)): every node when they are. */
    int byNodeRows() const {
        return byNode ? ChunkStart + Rows : Rows;
    }

    int K, N, S, Rows0, Rows1, Rows, ChunkStart;
    bool residual;
    int activation;
    bool byNode;
    mutable std::mt19937 rng;
    std::vector<std::unique_ptr<Buffer<real>>> weights, weightsT, biases, timesteps;
    std::unique_ptr<Buffer<int>> rowNodes;
    std::unique_ptr<Buffer<real>> input, gradOutput, scaleBuffer;
    std::vector<real> scaleValues;
};

template <typename real>
void expectBitwiseEqual(const std::vector<real>& expected, const std::vector<real>& found, const char* what, int tileRows) {
    ASSERT_EQ(expected.size(), found.size());
    for (size_t i = 0; i < expected.size(); i++)
        ASSERT_EQ(expected[i], found[i]) << what << " element " << i << ", tile of " << tileRows << " rows";
}

/** With gradScale, each input gradient comes out times its scale, as the layer below would form its dE/dz from it. */
template <typename real> void expectScaledGradient(const DenseLayerCase<real>& layer, const LayerResult<real>& found, int tileRows) {
    std::vector<real> scaled(found.gradInput.size());
    for (size_t i = 0; i < scaled.size(); i++)
        scaled[i] = found.gradInput[i] * layer.scale()[i];
    expectBitwiseEqual(scaled, found.scaledGradInput, "input gradient with gradScale", tileRows);
}

template <typename real> void checkEveryTile() {
    if (!haveCudaDevice())
        GTEST_SKIP() << "no CUDA device";
    // (rows, streamed, transposed weights, 64 x 128): the 128 x 128 tiles both ways in float; the streamed ones only where
    // the device takes them, with and without DenseBatch::weightT (which the other tiles ignore), and so the streamed 64 x 128
    // tiles (DenseBatch::streamedHalf; without weightT the forward takes the 64 x 64 register tiles).
    std::vector<std::tuple<int, bool, bool, bool>> tiles = {{64, false, false, false}, {32, false, false, false}, {8, false, true, false}};
    if (sizeof(real) == 4)
        tiles.push_back({128, false, true, false});
    const int streamable = configureDenseLayers<real>();
    if (streamable) {
        tiles.push_back({128, true, false, false});
        tiles.push_back({128, true, true, false});
    }
    else if (sizeof(real) == 4)
        std::printf("this device cannot stream the 128 x 128 tiles (configureDenseLayers): only their register kernel is compared\n");
    if (streamable == 2) {
        tiles.push_back({64, true, true, true});
        tiles.push_back({64, true, false, true});
    }
    else if (sizeof(real) == 4)
        std::printf("this device has no room for four blocks of the streamed 64 x 128 tiles (configureDenseLayers): not compared\n");
    struct Shape {
        int K, N;
        bool residual;
        int activation;
        bool byNode;
        int outPad;
        int rows0 = 37, rows1 = 50, chunkStart = 0;
    };
    // 100 inputs: not a multiple of any k-slice; 70 outputs: not a multiple of 32, 64 or 128 columns.  72 inputs, 70 outputs
    // in rows of 72: the output-side arrays' rows are padded.  Groups of 150 and 60 rows from row 23: a whole 128-row tile
    // (every copy of the streamed kernel's threads reads a row), chunk arrays that start at the chunk's first row, and a
    // backward product that reads dE/d(out) by node with act'(z) and a timestep (the streamed kernel's Mapped variant).
    // 240 x 240 residual in padded rows on those groups: the hidden layers' shape (two column tiles, whole k-slices), whose
    // 128 x 128 forward tiles finish through shared memory (storeTileStaged); 70 x 70 residual with the identity: its staged
    // variant.
    for (const Shape& s :
         {Shape{100, 70, false, GraphTanh, false, 0}, Shape{70, 70, true, GraphTanh, false, 0}, Shape{70, 70, true, GraphSilu, false, 0},
          Shape{136, 40, false, GraphIdentity, true, 0}, Shape{256, 128, false, GraphTanh, false, 0},
          Shape{72, 70, false, GraphTanh, false, 2}, Shape{100, 70, false, GraphTanh, false, 0, 150, 60, 23},
          Shape{70, 70, true, GraphTanh, true, 0, 150, 60, 23}, Shape{136, 40, false, GraphIdentity, true, 2, 150, 60, 23},
          Shape{256, 128, false, GraphTanh, false, 0, 150, 60, 23}, Shape{240, 240, true, GraphTanh, false, 2, 150, 60, 23},
          Shape{70, 70, true, GraphIdentity, false, 0}}) {
        SCOPED_TRACE("K " + std::to_string(s.K) + ", N " + std::to_string(s.N) + ", stride " + std::to_string(s.N + s.outPad) +
                     (s.residual ? ", residual" : "") + (s.byNode ? ", by node" : "") + ", activation " + std::to_string(s.activation) +
                     ", groups of " + std::to_string(s.rows0) + " and " + std::to_string(s.rows1) + " rows from row " +
                     std::to_string(s.chunkStart));
        DenseLayerCase<real> layer(s.K, s.N, s.residual, s.activation, s.byNode, s.outPad, s.rows0, s.rows1, s.chunkStart);
        const LayerResult<real> expected = layer.run(16);
        expectScaledGradient(layer, expected, 16);
        bool nonzero = false;
        for (real v : expected.gradInput)
            nonzero = nonzero || v != 0;
        EXPECT_TRUE(nonzero); // the backward ran
        for (auto [tileRows, streamed, transposed, half] : tiles) {
            SCOPED_TRACE(std::string(streamed ? "streamed k-slices" : "k-slices through registers") +
                         (transposed ? ", transposed weights" : "") + (half ? ", 64 x 128 tiles" : ""));
            const LayerResult<real> found = layer.run(tileRows, streamed, transposed, half);
            expectBitwiseEqual(expected.output, found.output, "output", tileRows);
            if (s.activation != GraphIdentity)
                expectBitwiseEqual(expected.derivative, found.derivative, "act'(z)", tileRows);
            expectBitwiseEqual(expected.gradInput, found.gradInput, "input gradient", tileRows);
            expectScaledGradient(layer, found, tileRows);
        }
    }
}

} // namespace

TEST(CudaDenseTiles, EveryTileGivesBitwiseTheSameLayerInFloat) {
    checkEveryTile<float>();
}

TEST(CudaDenseTiles, EveryTileGivesBitwiseTheSameLayerInDouble) {
    checkEveryTile<double>();
}

TEST(CudaDenseTiles, SmallBatchesGetTheStreamedTiles) {
    // 512 rows of 128 outputs on 132 multiprocessors: 16-row tiles give 64 blocks, fewer than two per multiprocessor.
    EXPECT_EQ(8, chooseDenseTileRows(512, 128, 132, true));
    EXPECT_EQ(32, denseTileColumns(8));
    // 100,800 rows: the widest tile still fills the device.
    EXPECT_EQ(128, chooseDenseTileRows(100800, 240, 132, true));
    EXPECT_EQ(64, chooseDenseTileRows(100800, 240, 132, false));
}

TEST(CudaDenseTiles, WideTilesFromOneBlockPerTwoMultiprocessors) {
    // fp32: 128-row tiles from 66 blocks on 132 multiprocessors (5,148 rows of 240 outputs: 41 x 2 = 82 blocks; 10,296:
    // 162), 64-row tiles from 132 (2,576 rows: 21 x 2 = 42 blocks of 128 rows, 41 x 4 = 164 of 64).
    EXPECT_EQ(128, chooseDenseTileRows(10296, 240, 132, true));
    EXPECT_EQ(128, chooseDenseTileRows(5148, 240, 132, true));
    EXPECT_EQ(64, chooseDenseTileRows(2576, 240, 132, true));
    EXPECT_EQ(128, chooseDenseTileRows(768, 1536, 132, true)); // 6 x 12 = 72 blocks
    EXPECT_EQ(64, chooseDenseTileRows(512, 1536, 132, true));  // 4 x 12 = 48 blocks of 128 rows, 8 x 24 = 192 of 64
    EXPECT_EQ(16, chooseDenseTileRows(2000, 240, 132, true));  // 32 x 4 = 128 blocks of 64 rows, 63 x 4 = 252 of 32, 500 of 16
    // fp64 keeps two blocks per multiprocessor for every tile: 2,576 rows of 240 outputs take 32-row tiles (324 blocks).
    EXPECT_EQ(32, chooseDenseTileRows(2576, 240, 132, false));
    // the 8-row tiles (and the fused network) exactly where 16-row tiles give fewer than 264 blocks
    for (int rows = 64; rows <= 20000; rows += 61)
        for (int outputs : {32, 64, 128, 240, 256})
            EXPECT_EQ((long long) ((rows + 15) / 16) * ((outputs + 63) / 64) < 264, chooseDenseTileRows(rows, outputs, 132, true) == 8)
                << rows << " rows, " << outputs << " outputs";
}

TEST(CudaDenseTiles, HalfTilesWhereTheyShortenTheBusiestWave) {
    // 132 multiprocessors.  Medium grade, 4 groups of 2,574 rows (21 tiles of 128 rows, 41 of 64 each): 240 outputs, 168
    // blocks of 128 rows (2 a multiprocessor, 4 in 64-row units) against 328 of 64 (3): both passes take the 64-row tiles;
    // the first layer's backward (1,536 outputs: 16 against 15 units) does not.
    EXPECT_TRUE(denseStreamedHalfTiles(84, 164, 240, 132, true));
    EXPECT_TRUE(denseStreamedHalfTiles(84, 164, 240, 132, false));
    EXPECT_FALSE(denseStreamedHalfTiles(84, 164, 1536, 132, false));
    // 4 groups of 5,148 rows (41 and 81 tiles each): 6 against 5 units, forward only.
    EXPECT_TRUE(denseStreamedHalfTiles(164, 324, 240, 132, true));
    EXPECT_FALSE(denseStreamedHalfTiles(164, 324, 240, 132, false));
    // 4 groups of 25,200 rows (197 and 394 tiles each): 24 units either way, the 128-row tiles stay.
    EXPECT_FALSE(denseStreamedHalfTiles(788, 1576, 240, 132, true));
    EXPECT_FALSE(denseStreamedHalfTiles(788, 1576, 1536, 132, false));
    // Small grade, 2 groups of 5,148 rows, 128 outputs: 82 blocks (2 units) against 162 (2): not taken; its first layer's
    // backward (256 outputs: 4 against 3 units) takes them.
    EXPECT_FALSE(denseStreamedHalfTiles(82, 162, 128, 132, true));
    EXPECT_TRUE(denseStreamedHalfTiles(82, 162, 256, 132, false));
}

TEST(CudaDenseTiles, ChosenTilesAndTheirStarts) {
    // chooseDenseTiles on the medium grade's 4 groups of 2,574 rows from row 100, 240 outputs, 132 multiprocessors.
    DenseBatch<float> batch{};
    batch.numGroups = 4;
    for (int g = 0; g <= 4; g++)
        batch.rowStart[g] = 100 + 2574 * g;
    chooseDenseTiles(batch, 240, 132, 2, true); // the 64 x 128 tiles: 41 a group
    EXPECT_EQ(64, batch.tileRows);
    EXPECT_EQ(1, batch.streamedHalf);
    EXPECT_EQ(1, batch.streamedWide);
    for (int g = 0; g <= 4; g++)
        EXPECT_EQ(41 * g, batch.tileStart[g]);
    chooseDenseTiles(batch, 240, 132, 1, true); // no room for them: 128 x 128, 21 a group
    EXPECT_EQ(128, batch.tileRows);
    EXPECT_EQ(0, batch.streamedHalf);
    for (int g = 0; g <= 4; g++)
        EXPECT_EQ(21 * g, batch.tileStart[g]);
    chooseDenseTiles(batch, 1536, 132, 2, false); // the first layer's backward keeps 128 x 128
    EXPECT_EQ(128, batch.tileRows);
    EXPECT_EQ(0, batch.streamedHalf);
    DenseBatch<double> wide{};
    wide.numGroups = 1;
    wide.rowStart[1] = 100800;
    chooseDenseTiles(wide, 240, 132, 0, true); // double: no 128-row tiles, no streaming
    EXPECT_EQ(64, wide.tileRows);
    EXPECT_EQ(0, wide.streamedWide);
    EXPECT_EQ(1575, wide.tileStart[1]);
}

TEST(CudaDenseTiles, WideTilesStreamWhereTheDeviceHasTheSharedMemory) {
    if (!haveCudaDevice())
        GTEST_SKIP() << "no CUDA device";
    int device = 0, major = 0, minor = 0;
    CUDA_OK(cudaGetDevice(&device));
    CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    const int capability = 10 * major + minor;
    EXPECT_FALSE(configureDenseLayers<double>()); // no 128 x 128 tiles in double
    // Two blocks of 74.8 KB fit a multiprocessor of 8.0 (164 KB) and 9.0 (228 KB), not one of 7.5 (64 KB), 8.6 or 8.9 (100 KB);
    // four of the 64 x 128 tiles' 50.5 KB fit 9.0's, not 8.0's.
    if (capability == 90)
        EXPECT_EQ(2, configureDenseLayers<float>()) << "compute capability " << capability;
    else if (capability == 80)
        EXPECT_EQ(1, configureDenseLayers<float>()) << "compute capability " << capability;
    else if (capability == 75 || capability == 86 || capability == 89)
        EXPECT_EQ(0, configureDenseLayers<float>()) << "compute capability " << capability;
    else
        std::printf("compute capability %d: configureDenseLayers<float>() gives %d\n", capability, (int) configureDenseLayers<float>());
}
