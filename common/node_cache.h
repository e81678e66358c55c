// Spare nodes of a node-based map (std::map, std::unordered_map), so that a map whose
// entries come and go at a steady rate (a handle per operation, a request per tensor in
// flight) allocates nothing once warm: Insert reuses an erased entry's node, Extract keeps
// the node it takes out.
//
//   NodeCache<std::unordered_map<int64_t, Entry>> spare;
//   spare.Insert(&entries, handle, Entry());
//   Entry e = std::move(spare.Extract(&entries, it));  // the reference stays valid until the
//                                                       // next Insert or Extract
//
// Not thread-safe: guard it with the map's lock.
#ifndef HORA_COMMON_NODE_CACHE_H_
#define HORA_COMMON_NODE_CACHE_H_

#include <cstddef>
#include <utility>
#include <vector>

namespace hora {

template <typename Map, size_t kMaxSpare = 64>
class NodeCache {
 public:
  using Key = typename Map::key_type;
  using Value = typename Map::mapped_type;

  // Inserts (key, value) unless the key is present (as Map::insert). Returns the entry.
  typename Map::iterator Insert(Map* map, Key key, Value value) {
    typename Map::node_type node = Take();
    if (node.empty()) return map->emplace(std::move(key), std::move(value)).first;
    node.key() = std::move(key);
    node.mapped() = std::move(value);
    return map->insert(std::move(node)).position;
  }

  // A spare node (empty if there is none) to fill and insert with Map::insert, or to give
  // back with Keep; its key and value hold an erased entry's (reuse their storage).
  typename Map::node_type Take() {
    if (spare_.empty()) return typename Map::node_type();
    typename Map::node_type node = std::move(spare_.back());
    spare_.pop_back();
    return node;
  }
  // A spare node, or a new one holding a default key and value.
  typename Map::node_type TakeOrMake() {
    typename Map::node_type node = Take();
    if (!node.empty()) return node;
    Map scratch;
    return scratch.extract(scratch.emplace(Key(), Value()).first);
  }
  void Keep(typename Map::node_type node) {
    if (spare_.size() < kMaxSpare) spare_.push_back(std::move(node));
  }

  // Takes the entry out of the map and keeps its node; the returned value (move from it)
  // lives in that node until the next Insert or Extract.
  Value& Extract(Map* map, typename Map::const_iterator it) {
    if (spare_.size() >= kMaxSpare) spare_.erase(spare_.begin());
    spare_.push_back(map->extract(it));
    return spare_.back().mapped();
  }

 private:
  std::vector<typename Map::node_type> spare_;
};

}  // namespace hora

#endif  // HORA_COMMON_NODE_CACHE_H_
