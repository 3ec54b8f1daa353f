// The CUDA platform's fixed-point energy words (platforms/cuda/src/GraphDeviceTypes.h, host and device code), checked on
// the CPU: each particle's energy is split into words that the kernels add with 64-bit integer atomics (modulo 2^64, as
// here), and energyOfWords turns the sums into the energy.  Below 3.6e16 kJ/mol the energy is the one of the two words
// used since the first version, bitwise; beyond, where the 2^-8 kJ/mol word wraps, it is exact all the same.  The GPU
// test CudaLargeSystems.EnergyTotalPastOneWordIsExact checks the kernels' sums on 38 million particles.
#include "GraphDeviceTypes.h"
#include <cmath>
#include <gtest/gtest.h>
#include <random>
#include <vector>

using namespace GraphPlugin;

namespace {

/** The words' sums as the device's atomics form them (modulo 2^64), and the exact sums (128-bit). */
struct WordSums {
    unsigned long long top = 0, high = 0, low = 0;
    __int128 exactHigh = 0, exactLow = 0;

    void add(double e) {
        const GraphEnergyWords words = energyWordsOf(e);
        top += (unsigned long long) words.top;
        high += (unsigned long long) words.high;
        low += (unsigned long long) words.low;
        exactHigh += words.high;
        exactLow += words.low;
    }
    double energy() const {
        return energyOfWords((long long) top, (long long) high, (long long) low);
    }
    /** The exact sums, rounded once: what energyOfWords must give past the wrap. */
    double exactEnergy() const {
        return (double) exactHigh * (1.0 / EnergyHighScale) + (double) exactLow * (1.0 / EnergyLowScale);
    }
    /** The energy as the two words alone give it (before session 66). */
    double twoWordEnergy() const {
        return (double) (long long) high * (1.0 / EnergyHighScale) + (double) (long long) low * (1.0 / EnergyLowScale);
    }
};

} // namespace

TEST(EnergyWords, OneParticleIsItsEnergyToTwoToTheMinusForty) {
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> magnitude(-9.0, 9.0);
    for (int i = 0; i < 100000; i++) {
        const double e = (i % 2 ? -1 : 1) * std::pow(10.0, magnitude(rng)) * 0.999;
        const GraphEnergyWords words = energyWordsOf(e);
        ASSERT_GE(words.low, 0) << e;
        ASSERT_LE(words.low, 1LL << 32) << e;
        ASSERT_EQ(words.top, (long long) std::floor((double) words.high / 4294967296.0)) << e;
        const double exact = (double) words.high / 256.0 + (double) words.low / 1099511627776.0;
        ASSERT_LE(std::fabs(exact - e), std::ldexp(1.0, -41) + 1e-16 * std::fabs(e)) << e;
    }
    // The extremes of the range: high's multiples of 2^32 from -64 to 63.
    EXPECT_EQ(energyWordsOf(-9.99999e8).top, -60);
    EXPECT_EQ(energyWordsOf(9.99999e8).top, 59);
    EXPECT_EQ(energyWordsOf(-1e-12).top, -1);
    EXPECT_EQ(energyWordsOf(0.0).top, 0);
}

TEST(EnergyWords, TotalsWithinOneWordAreThoseOfTheTwoWordsBitwise) {
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> energy(-9.9e8, 9.9e8), small(-1e4, 1e4);
    for (int trial = 0; trial < 20; trial++) {
        WordSums sums;
        for (int i = 0; i < 20000; i++)
            sums.add(trial % 2 ? energy(rng) : small(rng));
        EXPECT_EQ(sums.energy(), sums.twoWordEnergy()) << trial;
        EXPECT_EQ(sums.energy(), sums.exactEnergy()) << trial;
    }
}

TEST(EnergyWords, TotalsPastOneWordAreExact) {
    // 38 million particles near the 1e9 kJ/mol limit each: 3.76e16 kJ/mol, past the 2^63 / 2^8 = 3.6e16 of one word,
    // in both signs, and where large energies of both signs cancel to a total within one word.
    const long long n = 38000000;
    for (double sign : {1.0, -1.0}) {
        WordSums sums;
        for (long long i = 0; i < n; i++)
            sums.add(sign * (9.9e8 - 1e-3 * (double) (i % 1000)));
        ASSERT_GT(std::fabs((double) sums.exactHigh), 9.3e18) << "the case must pass 2^63 in the high word";
        ASSERT_LT(sign * sums.twoWordEnergy(), 0.0) << "the two words alone must have wrapped";
        EXPECT_EQ(sums.energy(), sums.exactEnergy()) << sign;
        EXPECT_NEAR(sums.energy(), sign * (9.9e8 - 0.4995) * (double) n, 1e-12 * 3.8e16);
    }
    WordSums mixed;
    for (long long i = 0; i < n; i++)
        mixed.add(i < n / 2 ? 9.9e8 + 1e-3 * (double) (i % 7) : -9.9e8);
    EXPECT_EQ(mixed.energy(), mixed.twoWordEnergy());
    EXPECT_EQ(mixed.energy(), mixed.exactEnergy());
}

TEST(EnergyWords, TheBoundaryOfOneWordIsExact) {
    // Totals of the high words at 2^63 - 1 and -2^63 (one word holds them) and at 2^63 and -2^63 - 1 (it does not), from
    // particles of high words 2^37 - 1 or -2^37 (about +-5.4e8 kJ/mol each) and one particle of the remainder.
    const __int128 top = ((__int128) 1 << 63);
    for (__int128 wanted : {top - 1, top, -top, -top - 1}) {
        const bool fits = wanted < top && wanted >= -top;
        const long long step = wanted > 0 ? (1LL << 37) - 1 : -(1LL << 37);
        const long long count = (long long) (wanted / step);
        WordSums sums;
        for (long long i = 0; i < count; i++)
            sums.add((double) step / 256.0);
        sums.add((double) (long long) (wanted - (__int128) count * step) / 256.0);
        ASSERT_TRUE(sums.exactHigh == wanted && sums.exactLow == 0);
        EXPECT_EQ(sums.energy(), sums.exactEnergy()) << fits;
        if (fits)
            EXPECT_EQ(sums.energy(), sums.twoWordEnergy());
        else
            EXPECT_NE(sums.energy(), sums.twoWordEnergy());
    }
}
