#include "common/node_cache.h"

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

using namespace hora;

TEST_CASE("node cache: an extracted node is reused by the next insert, with the new contents") {
  using Map = std::unordered_map<std::string, std::string>;
  Map m;
  NodeCache<Map> spare;
  spare.Insert(&m, "a name longer than the small-string buffer", "first value, also long enough");
  const std::string* first_key = &m.begin()->first;
  std::string v = std::move(spare.Extract(&m, m.begin()));
  REQUIRE(v == "first value, also long enough");
  REQUIRE(m.empty());
  auto it = spare.Insert(&m, "b", "second");
  REQUIRE(&it->first == first_key);  // the same node (no allocation)
  REQUIRE(m.size() == 1);
  REQUIRE(m.at("b") == "second");
  REQUIRE(m.count("a name longer than the small-string buffer") == 0);
}

TEST_CASE("node cache: Insert keeps an existing key's value, Take and Keep hand nodes out") {
  using Map = std::map<int, std::shared_ptr<int>>;
  Map m;
  NodeCache<Map, 2> spare;
  spare.Insert(&m, 1, std::make_shared<int>(10));
  auto again = spare.Insert(&m, 1, std::make_shared<int>(20));
  REQUIRE(*again->second == 10);
  REQUIRE(m.size() == 1);
  REQUIRE(spare.Take().empty());  // nothing spare yet
  std::weak_ptr<int> held = m.at(1);
  spare.Extract(&m, m.find(1)).reset();  // the caller drops what the spare node held
  REQUIRE(held.expired());
  Map::node_type node = spare.Take();
  REQUIRE_FALSE(node.empty());
  node.key() = 7;
  node.mapped() = std::make_shared<int>(70);
  m.insert(std::move(node));
  REQUIRE(*m.at(7) == 70);
  // At most kMaxSpare nodes are kept.
  for (int k = 100; k < 105; ++k) {
    Map other{{k, nullptr}};
    spare.Keep(other.extract(other.begin()));
  }
  int kept = 0;
  while (!spare.Take().empty()) ++kept;
  REQUIRE(kept == 2);
}
