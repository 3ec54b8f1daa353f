/**
 * Serialization of GraphForce (GraphForceProxy): XmlSerializer round trips of
 * the force and of a System, the embedded model bytes and their SHA-256, the
 * reading of version 1 (no digest), and the rejection of an unknown version,
 * of damaged model text and of hand-edited values.
 */
#include "GraphForce.h"
#include "TestModelBuilder.h"
#include "internal/Sha256.h"
#include "openmm/Context.h"
#include "openmm/OpenMMException.h"
#include "openmm/Platform.h"
#include "openmm/State.h"
#include "openmm/System.h"
#include "openmm/VerletIntegrator.h"
#include "openmm/serialization/XmlSerializer.h"
#include <gtest/gtest.h>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace GraphPlugin;
using namespace OpenMM;

extern "C" void registerGraphReferenceKernelFactories();

namespace {

std::string serializeForce(const GraphForce& force) {
    std::stringstream stream;
    XmlSerializer::serialize<GraphForce>(&force, "Force", stream);
    return stream.str();
}

std::unique_ptr<GraphForce> deserializeForce(const std::string& xml) {
    std::stringstream stream(xml);
    return std::unique_ptr<GraphForce>(XmlSerializer::deserialize<GraphForce>(stream));
}

/** A force with every field away from its default. */
std::unique_ptr<GraphForce> makeForce(const GraphTest::ModelOptions& options, int numParticles) {
    std::unique_ptr<GraphForce> force(GraphForce::fromModelBytes(GraphTest::makeModelBytes(options)));
    for (int i = 0; i < numParticles; i++)
        force->addParticle(3 * i + 1, (i * 7 + 1) % force->getNumTypes());
    force->setForceGroup(5);
    force->setName("ML region");
    force->setUsesPeriodicBoundaryConditions(true);
    force->setProperty("CheckFinite", "false");
    return force;
}

/** The value of the attribute `model="..."` and where it starts in the XML. */
size_t findModelText(const std::string& xml, std::string& text) {
    const std::string key = " model=\"";
    size_t start = xml.find(key);
    EXPECT_NE(start, std::string::npos) << "no model attribute in\n" << xml.substr(0, 400);
    start += key.size();
    size_t end = xml.find('"', start);
    text = xml.substr(start, end - start);
    return start;
}

std::string exceptionMessage(const std::string& xml) {
    try {
        deserializeForce(xml);
    }
    catch (const OpenMMException& e) {
        return e.what();
    }
    ADD_FAILURE() << "deserializing did not throw";
    return "";
}

/** The XML of a force with the first occurrence of `from` replaced by `to` (which must exist). */
std::string edited(const std::string& xml, const std::string& from, const std::string& to) {
    size_t position = xml.find(from);
    EXPECT_NE(position, std::string::npos) << "no " << from << " in the XML";
    std::string result = xml;
    if (position != std::string::npos)
        result.replace(position, from.size(), to);
    return result;
}

void expectSameForce(const GraphForce& expected, const GraphForce& actual) {
    EXPECT_EQ(expected.getModelBytes(), actual.getModelBytes());
    EXPECT_EQ(expected.getForceGroup(), actual.getForceGroup());
    EXPECT_EQ(expected.getName(), actual.getName());
    EXPECT_EQ(expected.usesPeriodicBoundaryConditions(), actual.usesPeriodicBoundaryConditions());
    EXPECT_EQ(expected.getProperties(), actual.getProperties());
    for (const std::string& key : GraphForce::getPropertyKeys())
        EXPECT_EQ(expected.getProperty(key), actual.getProperty(key)) << key;
    ASSERT_EQ(expected.getNumParticles(), actual.getNumParticles());
    for (int i = 0; i < expected.getNumParticles(); i++) {
        int particle1, type1, particle2, type2;
        expected.getParticleParameters(i, particle1, type1);
        actual.getParticleParameters(i, particle2, type2);
        EXPECT_EQ(particle1, particle2) << "particle " << i;
        EXPECT_EQ(type1, type2) << "particle " << i;
    }
    EXPECT_EQ(expected.getNumTypes(), actual.getNumTypes());
    EXPECT_EQ(expected.getCutoff(), actual.getCutoff());
}

} // namespace

TEST(GraphForceSerialization, RoundTripPreservesEveryField) {
    GraphTest::ModelOptions options;
    options.numTypes = 3;
    std::unique_ptr<GraphForce> force = makeForce(options, 7);
    std::unique_ptr<GraphForce> copy = deserializeForce(serializeForce(*force));
    ASSERT_NE(copy, nullptr);
    expectSameForce(*force, *copy);
    // A model file holds NUL bytes (the header length): they must survive.
    EXPECT_NE(copy->getModelBytes().find('\0'), std::string::npos);
}

TEST(GraphForceSerialization, DefaultsRoundTrip) {
    GraphTest::ModelOptions options;
    std::unique_ptr<GraphForce> force(GraphForce::fromModelBytes(GraphTest::makeModelBytes(options)));
    std::unique_ptr<GraphForce> copy = deserializeForce(serializeForce(*force));
    expectSameForce(*force, *copy);
    EXPECT_FALSE(copy->usesPeriodicBoundaryConditions());
    EXPECT_TRUE(copy->getProperties().empty());
    EXPECT_EQ(copy->getNumParticles(), 0);
}

TEST(GraphForceSerialization, EveryBase64PaddingRoundTrips) {
    // Model sizes with every remainder modulo 3, so that the encoding ends
    // with no '=', one '=' and two '='.
    std::set<size_t> remainders;
    for (int channels = 2; channels <= 9 && remainders.size() < 3; channels++) {
        for (bool float32 : {false, true}) {
            GraphTest::ModelOptions options;
            options.numChannels = channels;
            options.numAxis = 2;
            options.float32 = float32;
            options.intervals = 10 + channels;
            std::unique_ptr<GraphForce> force = makeForce(options, 3);
            remainders.insert(force->getModelBytes().size() % 3);
            std::unique_ptr<GraphForce> copy = deserializeForce(serializeForce(*force));
            EXPECT_EQ(force->getModelBytes(), copy->getModelBytes()) << "model of " << force->getModelBytes().size() << " bytes";
        }
    }
    EXPECT_EQ(remainders.size(), 3u) << "the models did not cover every base64 padding";
}

TEST(GraphForceSerialization, SystemRoundTripGivesTheSameEnergy) {
    registerGraphReferenceKernelFactories();
    const int numParticles = 12;
    GraphTest::ModelOptions options;
    System system;
    for (int i = 0; i < numParticles; i++)
        system.addParticle(1.0);
    GraphForce* force = GraphForce::fromModelBytes(GraphTest::makeModelBytes(options));
    for (int i = 0; i < numParticles; i++)
        force->addParticle(i, i % force->getNumTypes());
    system.addForce(force);

    std::stringstream stream;
    XmlSerializer::serialize<System>(&system, "System", stream);
    std::unique_ptr<System> copy(XmlSerializer::deserialize<System>(stream));
    ASSERT_EQ(copy->getNumForces(), 1);
    GraphForce* copiedForce = dynamic_cast<GraphForce*>(&copy->getForce(0));
    ASSERT_NE(copiedForce, nullptr) << "the deserialized force is not a GraphForce";
    expectSameForce(*force, *copiedForce);

    std::mt19937 rng(3);
    std::uniform_real_distribution<double> uniform(0.0, 0.8);
    std::vector<Vec3> positions;
    for (int i = 0; i < numParticles; i++)
        positions.push_back(Vec3(uniform(rng), uniform(rng), uniform(rng)));
    Platform& platform = Platform::getPlatformByName("Reference");
    VerletIntegrator integrator1(0.001), integrator2(0.001);
    Context context1(system, integrator1, platform), context2(*copy, integrator2, platform);
    context1.setPositions(positions);
    context2.setPositions(positions);
    State state1 = context1.getState(State::Energy | State::Forces);
    State state2 = context2.getState(State::Energy | State::Forces);
    EXPECT_NE(state1.getPotentialEnergy(), 0.0) << "the test model gives no energy: the comparison would prove nothing";
    EXPECT_EQ(state1.getPotentialEnergy(), state2.getPotentialEnergy());
    for (int i = 0; i < numParticles; i++)
        for (int j = 0; j < 3; j++)
            EXPECT_EQ(state1.getForces()[i][j], state2.getForces()[i][j]);
}

TEST(GraphForceSerialization, UnknownVersionIsRejected) {
    std::unique_ptr<GraphForce> force = makeForce(GraphTest::ModelOptions(), 2);
    std::string xml = serializeForce(*force);
    size_t position = xml.find(" version=\"2\"");
    ASSERT_NE(position, std::string::npos);
    for (const std::string& version : {"3", "0", "02"}) {
        std::string message = exceptionMessage(std::string(xml).replace(position, 12, " version=\"" + version + "\""));
        EXPECT_NE(message.find("version " + version + ";"), std::string::npos) << message;
        EXPECT_NE(message.find("versions 1 to 2"), std::string::npos) << message;
    }
}

TEST(GraphForceSerialization, Sha256MatchesKnownDigests) {
    // FIPS 180-4 examples, and messages whose padding crosses a block (55, 56 and 64 bytes).
    EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(sha256Hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    EXPECT_EQ(sha256Hex(std::string(55, 'a')), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    EXPECT_EQ(sha256Hex(std::string(56, 'a')), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    EXPECT_EQ(sha256Hex(std::string(64, 'a')), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
    EXPECT_EQ(sha256Hex(std::string("\0\xff", 2)), "06eb7d6a69ee19e5fbdf749018d3d2abfa04bcbd1365db312eb86dc7169389b8");
}

TEST(GraphForceSerialization, XmlRecordsTheModelsSha256) {
    std::unique_ptr<GraphForce> force = makeForce(GraphTest::ModelOptions(), 2);
    const std::string xml = serializeForce(*force);
    EXPECT_NE(xml.find(" modelSha256=\"" + sha256Hex(force->getModelBytes()) + "\""), std::string::npos) << xml.substr(0, 400);
}

TEST(GraphForceSerialization, EditedModelBytesAreRefusedByTheirSha256) {
    // Changing any one character of the model's base64 text (here one near its end, in the tensors' data, which the
    // loader alone might accept as other weights) is caught by the digest, before the bytes reach the loader.
    std::unique_ptr<GraphForce> force = makeForce(GraphTest::ModelOptions(), 2);
    const std::string xml = serializeForce(*force);
    std::string text;
    const size_t start = findModelText(xml, text);
    for (size_t offset : {size_t(8), text.size() / 2, size_t(40)}) {
        std::string damaged = xml;
        const size_t at = start + text.size() - offset;
        damaged[at] = damaged[at] == 'A' ? 'B' : 'A';
        const std::string message = exceptionMessage(damaged);
        EXPECT_NE(message.find("do not match the SHA-256 recorded beside them"), std::string::npos) << message;
        EXPECT_NE(message.find(sha256Hex(force->getModelBytes())), std::string::npos) << message;
    }
    // The digest itself edited: refused the same way; not a digest at all: named.
    const std::string digest = sha256Hex(force->getModelBytes());
    std::string otherDigest = digest;
    otherDigest[0] = otherDigest[0] == '0' ? '1' : '0';
    EXPECT_NE(exceptionMessage(edited(xml, digest, otherDigest)).find("do not match the SHA-256"), std::string::npos);
    for (const std::string& bad : {std::string("abc"), digest.substr(0, 63) + "G", std::string(64, 'A'), std::string()}) {
        const std::string message = exceptionMessage(edited(xml, "modelSha256=\"" + digest + "\"", "modelSha256=\"" + bad + "\""));
        EXPECT_NE(message.find("attribute 'modelSha256' is \"" + bad + "\"; expected the model's SHA-256 as 64 lowercase"),
                  std::string::npos)
            << message;
    }
    EXPECT_NE(exceptionMessage(edited(xml, " modelSha256=\"" + digest + "\"", "")).find("no attribute 'modelSha256'"), std::string::npos);
}

TEST(GraphForceSerialization, VersionOneWithoutDigestIsStillRead) {
    // What openmm-graph wrote before session 63: version 1, no modelSha256. It is read as before (without a check of
    // the bytes), and written again as version 2 with the digest.
    std::unique_ptr<GraphForce> force = makeForce(GraphTest::ModelOptions(), 3);
    const std::string xml = serializeForce(*force);
    const std::string digestAttribute = " modelSha256=\"" + sha256Hex(force->getModelBytes()) + "\"";
    const std::string versionOne = edited(edited(xml, " version=\"2\"", " version=\"1\""), digestAttribute, "");
    std::unique_ptr<GraphForce> copy = deserializeForce(versionOne);
    ASSERT_NE(copy, nullptr);
    expectSameForce(*force, *copy);
    EXPECT_EQ(serializeForce(*copy), xml);
    // Version 1 has no such attribute: a digest beside version 1 is refused by name, not ignored.
    const std::string message = exceptionMessage(edited(xml, " version=\"2\"", " version=\"1\""));
    EXPECT_NE(message.find("unknown attribute \"modelSha256\" (serialization version 1 has only"), std::string::npos) << message;
}

TEST(GraphForceSerialization, InvalidBase64CharacterIsRejected) {
    std::unique_ptr<GraphForce> force = makeForce(GraphTest::ModelOptions(), 2);
    std::string xml = serializeForce(*force);
    std::string text;
    size_t start = findModelText(xml, text);
    ASSERT_GT(text.size(), 40u);
    xml[start + 21] = '*';
    std::string message = exceptionMessage(xml);
    EXPECT_NE(message.find("invalid character '*'"), std::string::npos) << message;
    EXPECT_NE(message.find("position 21"), std::string::npos) << message;
}

TEST(GraphForceSerialization, MisplacedPaddingIsRejected) {
    std::unique_ptr<GraphForce> force = makeForce(GraphTest::ModelOptions(), 2);
    std::string xml = serializeForce(*force);
    std::string text;
    size_t start = findModelText(xml, text);
    xml[start + 5] = '=';
    std::string message = exceptionMessage(xml);
    EXPECT_NE(message.find("invalid character '='"), std::string::npos) << message;
}

TEST(GraphForceSerialization, TruncatedBase64IsRejected) {
    std::unique_ptr<GraphForce> force = makeForce(GraphTest::ModelOptions(), 2);
    std::string xml = serializeForce(*force);
    std::string text;
    size_t start = findModelText(xml, text);
    xml.erase(start + text.size() - 1, 1);
    std::string message = exceptionMessage(xml);
    EXPECT_NE(message.find("multiple of 4"), std::string::npos) << message;
}

TEST(GraphForceSerialization, DamagedModelIsRejectedByTheLoader) {
    // Valid base64 whose bytes are no model: characters 4-7 encode bytes 3-5 of
    // the safetensors header length, which become 0xFF (a header of ~2^40 bytes).
    // In version 1 (no digest) the loader is what refuses such bytes; in version 2 the digest refuses them first.
    std::unique_ptr<GraphForce> force = makeForce(GraphTest::ModelOptions(), 2);
    std::string xml = edited(edited(serializeForce(*force), " version=\"2\"", " version=\"1\""),
                             " modelSha256=\"" + sha256Hex(force->getModelBytes()) + "\"", "");
    std::string text;
    size_t start = findModelText(xml, text);
    xml.replace(start + 4, 4, "////");
    std::string message = exceptionMessage(xml);
    EXPECT_NE(message.find("GraphForce"), std::string::npos) << message;
    EXPECT_NE(message.find("header length"), std::string::npos) << message;
}

TEST(GraphForceSerialization, HandEditedValuesAreRefusedNotCoerced) {
    std::unique_ptr<GraphForce> force = makeForce(GraphTest::ModelOptions(), 3);
    const std::string xml = serializeForce(*force);
    // Each edit, and words the message must hold (OpenMM's own readers would take "true" as false, "H" as 0,
    // "1x" as 1, "1.9" as version 1 and a missing attribute as its default).
    const std::vector<std::pair<std::pair<std::string, std::string>, std::vector<std::string>>> cases = {
        {{"usesPeriodic=\"1\"", "usesPeriodic=\"true\""}, {"'usesPeriodic'", "\"true\"", "expected 1 or 0"}},
        {{"usesPeriodic=\"1\"", ""}, {"no attribute 'usesPeriodic'"}},
        {{"forceGroup=\"5\"", "forceGroup=\"three\""}, {"'forceGroup'", "\"three\"", "0 to 31"}},
        {{"forceGroup=\"5\"", "forceGroup=\"5x\""}, {"'forceGroup'", "\"5x\""}},
        {{"forceGroup=\"5\"", "forceGroup=\"32\""}, {"'forceGroup'", "\"32\""}},
        {{"version=\"2\"", "version=\"1.9\""}, {"version \"1.9\""}},
        {{"version=\"2\"", ""}, {"no attribute 'version'"}},
        {{"name=\"ML region\"", ""}, {"no attribute 'name'"}},
        {{"particle=\"4\" type=\"0\"", "particle=\"four\" type=\"1\""}, {"<Particle> element 1", "'particle'", "\"four\""}},
        {{"particle=\"4\" type=\"0\"", "particle=\"99999999999\" type=\"1\""}, {"'particle'", "\"99999999999\""}},
        {{"particle=\"4\" type=\"0\"", "particle=\"4\" type=\"H\""}, {"'type'", "\"H\"", "0 to 1"}},
        {{"particle=\"4\" type=\"0\"", "particle=\"4\" type=\"0\" charge=\"0\""}, {"unknown attribute \"charge\""}},
        {{"particle=\"4\" type=\"0\"", "particle=\"4\""}, {"<Particle> element 1", "no attribute 'type'"}},
        {{"<Particle ", "<Atom "}, {"<Particles> has a child <Atom>"}},
        {{"<Property key=\"CheckFinite\" value=\"false\"/>",
          "<Property key=\"CheckFinite\" value=\"false\"/><Property key=\"CheckFinite\" value=\"true\"/>"},
         {"\"CheckFinite\" is given twice"}},
        {{"<Properties>", "<Extra/><Properties>"}, {"unknown child <Extra>"}},
        {{" version=\"2\"", " version=\"2\" colour=\"red\""}, {"unknown attribute \"colour\"", "version 2 has only"}},
        // Found by a review (session 61): these were read as if the edit were not there.
        {{"<Particles>", "<Particles count=\"1000000000000000000\">"}, {"<Particles> element", "unknown attribute \"count\"", "has none"}},
        {{"<Properties>", "<Properties junk=\"1\">"}, {"<Properties> element", "unknown attribute \"junk\""}},
        {{"particle=\"4\" type=\"0\"/>", "particle=\"4\" type=\"0\"><Foo bar=\"1\"/></Particle>"},
         {"<Particle> element 1", "has a child <Foo>"}},
        {{"<Property key=\"CheckFinite\" value=\"false\"/>", "<Property key=\"CheckFinite\" value=\"false\"><Foo/></Property>"},
         {"a <Property> element has a child <Foo>"}},
    };
    for (const auto& edit : cases) {
        const std::string message = exceptionMessage(edited(xml, edit.first.first, edit.first.second));
        for (const std::string& word : edit.second)
            EXPECT_NE(message.find(word), std::string::npos)
                << "edit " << edit.first.second << ": '" << word << "' missing from: " << message;
        EXPECT_EQ(message.find("GraphForceProxy"), 0u) << message;
    }
    EXPECT_EQ(serializeForce(*deserializeForce(xml)), xml) << "the unedited XML still round-trips";
}

TEST(GraphForceSerialization, NameWithNulIsRefusedAtSerialization) {
    std::unique_ptr<GraphForce> force = makeForce(GraphTest::ModelOptions(), 2);
    force->setName(std::string("ml\0usesPeriodic", 15));
    try {
        serializeForce(*force);
        ADD_FAILURE() << "a name with NUL was serialized";
    }
    catch (const OpenMMException& e) {
        EXPECT_NE(std::string(e.what()).find("\"ml\\x00usesPeriodic\" contains a NUL character"), std::string::npos) << e.what();
    }
}
