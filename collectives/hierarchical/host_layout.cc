#include "collectives/hierarchical/host_layout.h"

#include <algorithm>

namespace hora {

int HostLayout::max_local_size() const {
  size_t m = 0;
  for (const auto& h : host_ranks) m = std::max(m, h.size());
  return static_cast<int>(m);
}

bool HostLayout::uniform() const {
  for (const auto& h : host_ranks) {
    if (h.size() != host_ranks.front().size()) return false;
  }
  return true;
}

std::vector<int> HostLayout::cross_group(int local_index) const {
  std::vector<int> group;
  for (const auto& h : host_ranks) {
    if (local_index < static_cast<int>(h.size())) group.push_back(h[local_index]);
  }
  std::sort(group.begin(), group.end());
  return group;
}

std::string HostLayout::Describe() const {
  std::string s;
  for (int h = 0; h < num_hosts(); ++h) {
    if (h) s += ", ";
    s += host_names[h] + " (" + std::to_string(host_ranks[h].size()) + " ranks)";
  }
  return s;
}

HostLayout LayoutOf(const std::vector<std::string>& hostnames, int rank) {
  HostLayout l;
  for (int r = 0; r < static_cast<int>(hostnames.size()); ++r) {
    auto it = std::find(l.host_names.begin(), l.host_names.end(), hostnames[r]);
    const int h = static_cast<int>(it - l.host_names.begin());
    if (it == l.host_names.end()) {
      l.host_names.push_back(hostnames[r]);
      l.host_ranks.emplace_back();
    }
    if (r == rank) {
      l.host = h;
      l.local_rank = static_cast<int>(l.host_ranks[h].size());
    }
    l.host_ranks[h].push_back(r);
  }
  return l;
}

BackendConfig SubConfig(const BackendConfig& config, const std::vector<int>& members,
                        const std::string& key_prefix) {
  BackendConfig c = config;
  c.global_ranks.clear();
  c.hostnames.clear();
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == config.rank) c.rank = static_cast<int>(i);
    c.global_ranks.push_back(config.global_ranks[members[i]]);
    c.hostnames.push_back(config.hostnames[members[i]]);
  }
  c.key_prefix = key_prefix;
  return c;
}

std::vector<size_t> ShardCounts(size_t count, int parts) {
  const size_t n = static_cast<size_t>(parts);
  std::vector<size_t> counts(n, count / n);
  for (size_t i = 0; i < count % n; ++i) ++counts[i];
  return counts;
}

}  // namespace hora
