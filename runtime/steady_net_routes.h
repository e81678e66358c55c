// Who a member of the board over messages (runtime/steady_net_board.h) talks to, and is
// connected to.
//   - Flat: every member sends its messages to every other member (n - 1 sends each).
//   - Two levels, for a set on several hosts with several members on some host: each host's
//     lowest member is its *leader*. A member sends its messages to its leader only; a leader
//     sends its host's messages to the other leaders in one message per instance, and, once it
//     has decided an instance, every member's messages for it to its host's members in one.
//     Per instance that is about 2 sends per member and h - 1 per leader, instead of n - 1 per
//     member (n members, h hosts), for two more hops.
#ifndef HORA_RUNTIME_STEADY_NET_ROUTES_H_
#define HORA_RUNTIME_STEADY_NET_ROUTES_H_

#include <string>
#include <vector>

namespace hora {

class SteadyRoutes {
 public:
  // hostnames: per member (empty: flat).
  SteadyRoutes(int member, const std::vector<std::string>& hostnames, int members);

  bool two_level() const { return two_level_; }
  bool leader() const { return leader_ == member_; }
  int my_leader() const { return leader_; }
  int hosts() const { return hosts_; }
  bool local(int m) const { return same_host(m, member_); }
  bool same_host(int a, int b) const {
    return host_of_[static_cast<size_t>(a)] == host_of_[static_cast<size_t>(b)];
  }
  // A leader's members other than itself; the leaders other than this member's leader.
  const std::vector<int>& locals() const { return locals_; }
  const std::vector<int>& leaders() const { return leaders_; }
  // The members of this member's host, itself included, in member order.
  const std::vector<int>& host_members() const { return host_members_; }
  // Where this member's own messages go (two levels: its leader, or for a leader nobody: it
  // relays them itself; flat: every other member).
  const std::vector<int>& own_targets() const { return own_targets_; }
  // The members this one needs a connection to (collectives/mailbox.h; symmetric): flat,
  // every other member; on two levels a member's leader, a leader's members and the other
  // leaders. O(members per host + hosts) connections, not O(members).
  const std::vector<int>& peers() const { return peers_; }

 private:
  const int member_;
  bool two_level_ = false;
  int leader_;
  int hosts_ = 1;
  std::vector<int> host_of_;
  std::vector<int> locals_;
  std::vector<int> leaders_;
  std::vector<int> host_members_;
  std::vector<int> own_targets_;
  std::vector<int> peers_;
};

}  // namespace hora

#endif  // HORA_RUNTIME_STEADY_NET_ROUTES_H_
