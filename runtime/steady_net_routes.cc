#include "runtime/steady_net_routes.h"

#include <algorithm>
#include <map>

namespace hora {

SteadyRoutes::SteadyRoutes(int member, const std::vector<std::string>& hostnames, int members)
    : member_(member), leader_(member) {
  host_of_.resize(static_cast<size_t>(members));
  std::map<std::string, int> index;
  std::vector<int> first;  // per host: its lowest member
  bool shared = false;     // some host holds several members
  for (int m = 0; m < members; ++m) {
    const std::string& name = static_cast<int>(hostnames.size()) == members
                                  ? hostnames[static_cast<size_t>(m)]
                                  : std::to_string(m);  // unknown: a host per member
    auto it = index.find(name);
    if (it == index.end()) {
      it = index.emplace(name, static_cast<int>(first.size())).first;
      first.push_back(m);
    } else {
      shared = true;
    }
    host_of_[static_cast<size_t>(m)] = it->second;
  }
  hosts_ = static_cast<int>(first.size());
  two_level_ = hosts_ > 1 && shared;
  for (int m = 0; m < members; ++m) {
    if (local(m)) host_members_.push_back(m);
  }
  if (!two_level_) {
    for (int m = 0; m < members; ++m) {
      if (m != member_) own_targets_.push_back(m);
    }
    peers_ = own_targets_;
    return;
  }
  leader_ = first[static_cast<size_t>(host_of_[static_cast<size_t>(member_)])];
  if (!leader()) {
    own_targets_.push_back(leader_);
    peers_ = own_targets_;
    return;
  }
  for (int m : host_members_) {
    if (m != member_) locals_.push_back(m);
  }
  for (int l : first) {
    if (l != member_) leaders_.push_back(l);
  }
  peers_ = locals_;
  peers_.insert(peers_.end(), leaders_.begin(), leaders_.end());
  std::sort(peers_.begin(), peers_.end());
}

}  // namespace hora
