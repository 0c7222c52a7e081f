// Every model_type load_model accepts (the families' tables, through the registry) has a
// transformers fixture under tests/data/models, as the checkpoint's own model_type or as the
// text model_type of a wrapper: a type added to a table without one fails here.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "fixture.h"
#include "loader/config.h"
#include "models/model.h"

namespace hearth {
namespace {

TEST(ModelTypes, EverySupportedTypeHasAFixture) {
  std::set<std::string> covered;
  for (const test::FixtureCase& c : test::fixture_cases({})) {
    const ModelConfig config = ModelConfig::load(c.dir);
    covered.insert(config.model_type());
    covered.insert(config.wrapper_model_type());
  }
  for (const std::string& type : supported_model_types())
    EXPECT_TRUE(covered.count(type)) << type << " has no fixture (tools/fixtures/make_fixtures.py)";
}

}  // namespace
}  // namespace hearth
