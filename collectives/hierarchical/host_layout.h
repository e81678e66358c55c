// Where the members of a process set sit: which host each is on, and the two groups a
// hierarchical communicator is built from. Pure functions over the set's hostnames; no I/O.
//
// Hosts are numbered in order of their first member (set rank order); a host's members are
// its "local" ranks 0, 1, ... in set rank order. The cross-host group of local index i is the
// i-th member of every host, in set rank order (that is also the order of their global ranks,
// since a set's members are sorted).
#ifndef HORA_COLLECTIVES_HIERARCHICAL_HOST_LAYOUT_H_
#define HORA_COLLECTIVES_HIERARCHICAL_HOST_LAYOUT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "collectives/registry.h"
#include "common/status.h"

namespace hora {

struct HostLayout {
  std::vector<std::string> host_names;       // per host, in order of first member
  std::vector<std::vector<int>> host_ranks;  // per host: its members' set ranks, ascending
  int host = 0;                              // this rank's host
  int local_rank = 0;                        // this rank's index on its host

  int num_hosts() const { return static_cast<int>(host_ranks.size()); }
  // The most members on one host.
  int max_local_size() const;
  // True when every host has the same number of members.
  bool uniform() const;
  // Set ranks of the i-th member of every host that has one, ascending.
  std::vector<int> cross_group(int local_index) const;
  // "host-a (2 ranks), host-b (3 ranks)".
  std::string Describe() const;
};

// The layout of `hostnames` (one per member, in set rank order) as seen by set rank `rank`.
// REQUIRES: 0 <= rank < hostnames.size().
HostLayout LayoutOf(const std::vector<std::string>& hostnames, int rank);

// The config of the sub-communicator over `members` (set ranks, ascending, containing
// config.rank): the same set, store, timeout and network settings, the members' global ranks
// and hostnames, this rank's position among them, and `key_prefix`.
BackendConfig SubConfig(const BackendConfig& config, const std::vector<int>& members,
                        const std::string& key_prefix);

// Splits `count` elements into `parts` shards in order: the first count % parts shards get
// one element more than the others. REQUIRES: parts >= 1.
std::vector<size_t> ShardCounts(size_t count, int parts);

}  // namespace hora

#endif  // HORA_COLLECTIVES_HIERARCHICAL_HOST_LAYOUT_H_
